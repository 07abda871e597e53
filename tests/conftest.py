"""Fixtures for the integration and e2e tests: etcd + kube-apiserver + kube-controller-manager on
127.0.0.1, the CRD applied with kubectl, and the operator as its own process, as a user runs it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import kubernetes
import pytest

from tfjob_testbed.controlplane.binaries import ensure_binaries
from tfjob_testbed.controlplane.plane import ControlPlane
from tfjob_testbed.core.kube import Kubectl, Kubelet, wait_for
from tfjob_testbed.core.tools import ensure_tools
from tfjob_testbed.project.operator import OperatorProcess
from tfjob_testbed.sandbox import install_crd

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory) -> Iterator[ControlPlane]:
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"), ensure_binaries())
    try:
        plane.start()
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kubectl(control_plane) -> Kubectl:
    return Kubectl(ensure_tools().kubectl, control_plane.kubeconfig)


@pytest.fixture(scope="session")
def api(control_plane) -> kubernetes.client.ApiClient:
    return kubernetes.config.new_client_from_config(config_file=str(control_plane.kubeconfig))


@pytest.fixture(scope="session")
def core(api) -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api)


@pytest.fixture(scope="session")
def apps(api) -> kubernetes.client.AppsV1Api:
    return kubernetes.client.AppsV1Api(api)


@pytest.fixture(scope="session")
def custom(api) -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api)


@pytest.fixture(scope="session")
def crd(kubectl) -> None:
    """The CRD as users install it."""
    install_crd(kubectl)


def _operator(control_plane, tmp_path_factory, name: str, *args: str) -> Iterator[OperatorProcess]:
    """An operator process for the session, stopped at its end; its log's path is printed."""
    proc = OperatorProcess(
        control_plane.kubeconfig, tmp_path_factory.mktemp(name) / "operator.log", args
    )
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        print(f"{name} log: {proc.log}")


@pytest.fixture(scope="session")
def operator(control_plane, crd, tmp_path_factory) -> Iterator[OperatorProcess]:
    yield from _operator(control_plane, tmp_path_factory, "operator")


@pytest.fixture(scope="session")
def kubeflow_operator(control_plane, kubectl, tmp_path_factory) -> Iterator[OperatorProcess]:
    """A second operator, serving Kubeflow's group (`--api-group kubeflow.org`) with its CRD
    from manifests/kubeflow/, beside the first: each reconciles only its own group's jobs."""
    install_crd(kubectl, "kubeflow.org")
    yield from _operator(
        control_plane, tmp_path_factory, "kubeflow-operator", "--api-group", "kubeflow.org"
    )


@pytest.fixture
def ns(kubectl, core, request) -> Iterator[str]:
    """A namespace of the test's own, deleted afterwards (without waiting)."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)
    wait_for(
        lambda: core.list_namespaced_service_account(name).items,
        60,
        f"default service account in {name}",
    )
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture
def kubelet(core, ns) -> Kubelet:
    return Kubelet(core, ns)
