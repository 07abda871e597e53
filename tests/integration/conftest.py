"""Fixtures the integration tests share (user_view.py has what they read with)."""

from __future__ import annotations

import kubernetes
import pytest

from tests.integration.user_view import Job
from tfjob_operator.controller.client import Kube
from tfjob_operator.rules import kueue
from tfjob_testbed.addons import kueue_install as kq
from tfjob_testbed.project.operator import stepped_aside

KUEUE_TAINT = {"key": "pool", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}
KUEUE_FLAVORS = {
    "on-demand": {"nodeLabels": {"pool": "on-demand"}},
    "spot": {"nodeLabels": {"pool": "spot"}, "tolerations": [KUEUE_TAINT]},
}


@pytest.fixture
def job(custom, core, apps, kubectl, ns, operator):
    return Job(custom, core, apps, kubectl, ns)


@pytest.fixture
def kf_job(custom, core, apps, kubectl, ns, kubeflow_operator):
    """The namespace's TFJobs of Kubeflow's group, run by the operator that serves it."""
    return Job(custom, core, apps, kubectl, ns, group="kubeflow.org")


@pytest.fixture
def kube(control_plane, monkeypatch) -> Kube:
    """The operator's own client, against the test's control plane."""
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    kubernetes.config.load_kube_config(config_file=str(control_plane.kubeconfig))
    return Kube()


@pytest.fixture
def kueue_crds(kubectl, custom):
    """Kueue's CRDs from its release (no Kueue running), and two ResourceFlavors."""
    docs = kq.crd_documents()
    created = kubectl.run("create", "--validate=false", "-f", "-", input=docs, check=False)
    assert created.returncode == 0 or "AlreadyExists" in created.stderr, created.stderr
    kubectl.wait_established(*kq.CRD_NAMES)
    for name, spec in KUEUE_FLAVORS.items():
        body = kq.flavor(name, spec)
        try:
            custom.create_cluster_custom_object(kueue.GROUP, kq.VERSION, "resourceflavors", body)
        except kubernetes.client.ApiException as e:
            if e.status != 409:
                raise


@pytest.fixture
def kueue_operator(kueue_crds, operator, control_plane, tmp_path):
    """The operator with --kueue, in the session's operator's place for the test."""
    with stepped_aside(operator, control_plane.kubeconfig, tmp_path / "op.log", ["--kueue"]) as op:
        yield op
