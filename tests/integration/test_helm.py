"""The Helm chart on a real Kubernetes control plane: install, upgrade and uninstall as a
user runs them, checked with kubectl. There is no kubelet, so the operator pod stays Pending;
what is tested is that the API server and controller-manager accept everything the chart makes.

The control plane is this module's own: here helm must create and own the CRD, while the
session's plane has the CRD applied with kubectl (and an operator watching it) for the other
tests. Sharing it would make this test depend on which tests ran first, and the other tests on
what this one uninstalls."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tfjob_operator.api import crd, rbac
from tfjob_testbed.controlplane.binaries import ensure_binaries
from tfjob_testbed.controlplane.plane import ControlPlane
from tfjob_testbed.core.kube import Kubectl, wait_for
from tfjob_testbed.core.tools import ensure_tools
from tfjob_testbed.project.tfjob_cli import tfjob_cli

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "tfjob-operator"
RELEASE = NAME = "tfjob-operator"  # the release name holds the chart name: resources use it alone
NAMESPACE = "tfjob-system"
CRD = "crd/tfjobs.tfjob.dev"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"
CLUSTER_SCOPED = {"customresourcedefinitions", "namespaces"}

TFJOB = {
    "apiVersion": "tfjob.dev/v1",
    "kind": "TFJob",
    "metadata": {"name": "mnist", "namespace": "team-a"},
    "spec": {
        "tfReplicaSpecs": {
            "Worker": {
                "replicas": 1,
                "template": {
                    "spec": {"containers": [{"name": "tensorflow", "image": "tensorflow/x"}]}
                },
            }
        }
    },
}


@dataclass(frozen=True)
class Helm:
    """The helm CLI pointed at one control plane's kubeconfig."""

    binary: Path
    kubeconfig: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.binary), "--kubeconfig", str(self.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )

    def __call__(self, *args: str) -> str:
        proc = self.run(*args)
        assert proc.returncode == 0, f"helm {' '.join(args)} failed: {proc.stderr}"
        return proc.stdout


@pytest.fixture(scope="module")
def plane(tmp_path_factory) -> Iterator[ControlPlane]:
    with ControlPlane(tmp_path_factory.mktemp("helm-plane"), ensure_binaries()) as p:
        yield p


@pytest.fixture(scope="module")
def kube(plane) -> Kubectl:
    return Kubectl(ensure_tools().kubectl, plane.kubeconfig)


@pytest.fixture(scope="module")
def helm(plane) -> Helm:
    return Helm(ensure_tools().helm, plane.kubeconfig)


def found(kube: Kubectl, *args: str) -> bool:
    return kube.run("get", *args, "-o", "name", check=False).returncode == 0


def operator_pods(kube: Kubectl, selector: str = SELECTOR) -> list[dict[str, Any]]:
    return kube.get_json("pods", "-n", NAMESPACE, "-l", selector)["items"]


def args_of(kube: Kubectl, name: str = NAME) -> list[str]:
    deployment = kube.get_json("deployment", name, "-n", NAMESPACE)
    return deployment["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.smoke
def test_install_upgrade_uninstall(helm, kube, plane):
    assert not found(kube, CRD), "this plane is fresh: helm is to create the CRD"
    # Before the install, the tfjob command says what is missing, in one line.
    proc = tfjob_cli(plane.kubeconfig, "get")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "the TFJob CRD (tfjobs.tfjob.dev) is not installed" in proc.stderr

    notes = helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace")
    assert "kubectl get tfj -w" in notes
    kube.wait_established(CRD.removeprefix("crd/"))

    # The CRD is the generated one, kept on uninstall, owned by the release.
    served = kube.get_json(CRD)
    assert served["spec"]["versions"] == crd.crd()["spec"]["versions"]
    assert served["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert served["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"

    assert found(kube, "serviceaccount", NAME, "-n", NAMESPACE)
    assert kube.get_json("clusterrole", NAME)["rules"] == rbac.RULES
    binding = kube.get_json("clusterrolebinding", NAME)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    service = kube.get_json("service", f"{NAME}-metrics", "-n", NAMESPACE)
    assert [(p["port"], p["protocol"]) for p in service["spec"]["ports"]] == [(9090, "TCP")]
    assert "--metrics-port=9090" in args_of(kube)
    # The controller-manager makes the pod from the chart's template, so the real API server
    # accepted it; with no kubelet it is never scheduled.
    pods = wait_for(lambda: len(p := operator_pods(kube)) == 2 and p, 60, "two operator pods")
    for pod in pods:
        assert pod["status"]["phase"] == "Pending"
        assert pod["spec"]["serviceAccountName"] == NAME
    pdb = kube.get_json("pdb", NAME, "-n", NAMESPACE)
    assert (pdb["apiVersion"], pdb["spec"]["minAvailable"]) == ("policy/v1", 1)
    lease_role = kube.get_json("role", f"{NAME}-leader-election", "-n", NAMESPACE)
    assert lease_role["rules"][1]["resourceNames"] == [f"{NAME}-leader"]
    assert "--leader-elect" in args_of(kube)

    # The CRD serves TFJobs (no operator runs here to act on them).
    kube("create", "namespace", "team-a")
    kube.apply(TFJOB)
    assert kube("get", "tfj", "-n", "team-a", "-o", "name").strip() == "tfjob.tfjob.dev/mnist"

    # Upgrade: one watched namespace, no metrics, debug logs, one replica without election.
    helm(
        "upgrade", RELEASE, str(CHART), "-n", NAMESPACE,
        "--set", "watchNamespaces={team-a}", "--set", "metrics.enabled=false",
        "--set", "logLevel=debug", "--set", "replicaCount=1",
        "--set", "leaderElection.enabled=false",
    )  # fmt: skip
    status = yaml.safe_load(helm("status", RELEASE, "-n", NAMESPACE, "-o", "yaml"))
    assert (status["version"], status["info"]["status"]) == (2, "deployed")
    args = args_of(kube)
    assert "--namespace=team-a" in args and "--log-level=debug" in args
    assert not any(a.startswith("--metrics-port") for a in args)
    assert not found(kube, "service", f"{NAME}-metrics", "-n", NAMESPACE)
    assert not found(kube, "pdb", NAME, "-n", NAMESPACE)
    assert not found(kube, "role", f"{NAME}-leader-election", "-n", NAMESPACE)
    assert "--leader-elect" not in args
    # A namespaced operator makes no cluster-wide request: no ClusterRole is left to it.
    for what in (("clusterrole", NAME), ("clusterrolebinding", NAME)):
        wait_for(lambda what=what: not found(kube, *what), 60, f"{' '.join(what)} deleted")
    role = kube.get_json("role", NAME, "-n", "team-a")
    assert role["rules"] == [r for r in rbac.RULES if not CLUSTER_SCOPED & set(r["resources"])]
    assert kube.get_json("rolebinding", NAME, "-n", "team-a")["subjects"][0]["name"] == NAME
    # Recreate: the old pod goes before the new one, which has the new arguments.
    wait_for(
        lambda: (
            [
                p
                for p in operator_pods(kube)
                if "--namespace=team-a" in p["spec"]["containers"][0]["args"]
                and "deletionTimestamp" not in p["metadata"]
            ]
            and len(operator_pods(kube)) == 1
        ),
        60,
        "one operator pod, with the upgraded arguments",
    )

    # Uninstall: everything goes but the CRD, and with it the TFJobs.
    out = helm("uninstall", RELEASE, "-n", NAMESPACE)
    assert "tfjobs.tfjob.dev" in out  # "These resources were kept due to the resource policy"
    for what in (
        ("deployment", NAME, "-n", NAMESPACE),
        ("serviceaccount", NAME, "-n", NAMESPACE),
        ("clusterrole", NAME),
        ("clusterrolebinding", NAME),
        ("role", NAME, "-n", "team-a"),
        ("rolebinding", NAME, "-n", "team-a"),
    ):
        wait_for(lambda what=what: not found(kube, *what), 60, f"{' '.join(what)} deleted")
    assert found(kube, CRD)
    assert found(kube, "tfj", "mnist", "-n", "team-a")


def test_reinstall_adopts_the_kept_crd_and_a_second_release_shares_it(helm, kube):
    """A kept CRD still names its release: the same release takes it back, another must not
    install it (crds.install=false) and shares it."""
    kube("create", "namespace", "team-b")
    try:
        helm("install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace")
        owner = kube.get_json(CRD)["metadata"]["annotations"]["meta.helm.sh/release-name"]
        assert owner == RELEASE

        team = ["-n", "team-b", "--set", "watchNamespaces={team-b}"]
        refused = helm.run("install", "team-b", str(CHART), *team)
        assert refused.returncode != 0 and "invalid ownership metadata" in refused.stderr
        helm("install", "team-b", str(CHART), *team, "--set", "crds.install=false")
        assert found(kube, "role", "team-b-tfjob-operator", "-n", "team-b")
        assert found(kube, "deployment", "team-b-tfjob-operator", "-n", "team-b")
    finally:
        for release, ns in (("team-b", "team-b"), (RELEASE, NAMESPACE)):
            helm.run("uninstall", release, "-n", ns)
    assert found(kube, CRD)
