"""The operator watching some namespaces only (`--namespace`, the chart's `watchNamespaces`), under
exactly the RBAC the chart renders for that: a Role in each watched namespace and no ClusterRole.
It runs a job there, leaves jobs elsewhere alone, and makes no cluster-wide request at all."""

from __future__ import annotations

import subprocess
import uuid

import pytest
import yaml

from tfjob_operator.api.spec import GROUP, PLURAL, VERSION
from tfjob_operator.rules import status as st
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import service_account_kubeconfig, wait_for
from tfjob_testbed.core.paths import ROOT
from tfjob_testbed.core.tools import ensure_tools
from tfjob_testbed.project.operator import stepped_aside

pytestmark = pytest.mark.integration

RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
CHART_KINDS = {"ServiceAccount", "Role", "RoleBinding"}  # nothing cluster-wide
RELEASE, RELEASE_NAMESPACE = "scoped", "tfjob-scoped"
FULLNAME = f"{RELEASE}-tfjob-operator"


def chart_rbac(watched: str) -> list[dict]:
    """The chart's ServiceAccount and RBAC objects for watching one namespace, as helm renders
    them (the Deployment needs an image and a kubelet, which this control plane lacks)."""
    out = subprocess.run(
        [
            str(ensure_tools().helm),
            "template",
            RELEASE,
            str(ROOT / "charts" / "tfjob-operator"),
            "--namespace",
            RELEASE_NAMESPACE,
            "--set",
            f"watchNamespaces={{{watched}}}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d and d["kind"] in RBAC_KINDS]


@pytest.fixture
def other(kubectl):
    name = f"u-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)
    yield name
    kubectl("delete", "namespace", name, "--wait=false")


@pytest.mark.smoke
def test_namespaced_operator_runs_jobs_in_its_namespaces_only(
    kubectl, control_plane, apps, custom, kubelet, ns, other, operator, tmp_path
) -> None:
    objects = chart_rbac(ns)
    assert {o["kind"] for o in objects} == CHART_KINDS
    roles = {
        (o["metadata"]["name"], o["metadata"]["namespace"]) for o in objects if o["kind"] == "Role"
    }
    # One Role per watched namespace, and the Lease's in the release namespace.
    assert roles == {(FULLNAME, ns), (f"{FULLNAME}-leader-election", RELEASE_NAMESPACE)}
    kubectl.run("create", "namespace", RELEASE_NAMESPACE, check=False)  # kept across tests
    for obj in objects:
        kubectl.apply(obj, namespace=obj["metadata"].get("namespace") or RELEASE_NAMESPACE)
    account = next(o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount")
    kubeconfig = service_account_kubeconfig(
        kubectl, control_plane.kubeconfig, RELEASE_NAMESPACE, account, tmp_path / "sa"
    )
    denied = kubectl.run("--kubeconfig", str(kubeconfig), "get", "pods", "-n", other, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr, "no rights outside ns"

    log = tmp_path / "operator.log"
    args = [
        f"--namespace={ns}",
        "--leader-elect",
        f"--leader-elect-resource-namespace={RELEASE_NAMESPACE}",
        f"--leader-elect-resource-name={FULLNAME}-leader",
    ]
    with stepped_aside(operator, kubeconfig, log, args=args) as scoped:
        for namespace in (other, ns):  # the unwatched one first: by the end it had its chance
            body = tfjob(namespace=namespace, replicas={"Worker": 2})
            body["metadata"].pop("uid")
            kubectl.apply(body)

        def pods() -> list[str]:
            return sorted(p.metadata.name for p in kubelet.core.list_namespaced_pod(ns).items)

        wait_for(lambda: len(pods()) == 2, 60, "the watched job's 2 pods")
        for pod in pods():
            kubelet.set(pod)
        kubelet.set("mnist-worker-0", state="terminated", exit_code=0)

        def job(namespace: str) -> dict:
            return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "mnist")

        wait_for(
            lambda: st.state(job(ns).get("status") or {}) == "Succeeded",
            60,
            "the watched job to succeed",
        )
        assert "status" not in job(other), job(other)
        assert apps.list_namespaced_stateful_set(other).items == []
        user = f"system:serviceaccount:{RELEASE_NAMESPACE}:{account}"
        denials = scoped.denials(user)
        assert denials == [], denials[:3]
    requests = [e for e in control_plane.audit() if e["user"]["username"] == user]
    assert {
        (e.get("objectRef") or {}).get("resource") for e in requests if e["verb"] == "watch"
    } >= {
        "tfjobs",
        "pods",
        "statefulsets",
        "deployments",
    }
    wide = [e["requestURI"] for e in requests if not (e.get("objectRef") or {}).get("namespace")]
    assert wide == [], wide[:5]
