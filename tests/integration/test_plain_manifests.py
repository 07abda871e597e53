"""`kubectl apply -f manifests/` as a user runs it, and the operator running under exactly the
permissions manifests/rbac.yaml grants it."""

from __future__ import annotations

import pytest
import yaml

from tfjob_operator.api.spec import GROUP, PLURAL, VERSION
from tfjob_operator.rules import status as st
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import service_account_kubeconfig, wait_for
from tfjob_testbed.core.paths import ROOT
from tfjob_testbed.project.operator import stepped_aside

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def installed(kubectl):
    """The whole folder in one go: CRD, operator Deployment, RBAC (examples live below it)."""
    out = kubectl("apply", "-f", str(ROOT / "manifests"))
    kubectl.wait_established("tfjobs.tfjob.dev")
    return out


def test_apply_manifests_in_one_go(installed, kubectl, ns):
    for kind in (
        "customresourcedefinition.apiextensions.k8s.io/tfjobs.tfjob.dev",
        "namespace/tfjob-system",
        "deployment.apps/tfjob-operator",
        "serviceaccount/tfjob-operator",
        "clusterrole.rbac.authorization.k8s.io/tfjob-operator",
        "clusterrolebinding.rbac.authorization.k8s.io/tfjob-operator",
        "role.rbac.authorization.k8s.io/tfjob-operator-leader-election",
        "rolebinding.rbac.authorization.k8s.io/tfjob-operator-leader-election",
    ):
        assert kind in installed
    out = kubectl("apply", "-n", ns, "-f", str(ROOT / "manifests" / "examples"))
    assert out.count("tfjob.tfjob.dev/") == 5
    names = {j["metadata"]["name"] for j in kubectl.get_json("tfj", "-n", ns)["items"]}
    assert names == {
        "mnist-ps",
        "mnist-sync",
        "mnist-multi-gpu",
        "mnist-between-graph",
        "mnist-tensorboard",
    }


@pytest.mark.smoke
def test_operator_runs_a_job_with_only_the_granted_permissions(
    installed, kubectl, control_plane, custom, kubelet, ns, operator, tmp_path
):
    kubeconfig = service_account_kubeconfig(
        kubectl, control_plane.kubeconfig, "tfjob-system", "tfjob-operator", tmp_path / "sa"
    )
    denied = kubectl.run("--kubeconfig", str(kubeconfig), "get", "secrets", "-n", ns, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr, "least privilege"
    # As operator.yaml runs it: electing a leader through the Lease its Role allows.
    args = ["--leader-elect", "--leader-elect-resource-namespace=tfjob-system"]
    with stepped_aside(operator, kubeconfig, tmp_path / "operator.log", args) as restricted:
        body = tfjob(
            namespace=ns,
            replicas={"PS": 1, "Worker": 2},
            checkpoint={"storage": {"size": "1Gi"}},
            run_policy={"ttlSecondsAfterFinished": 3},
        )
        body["metadata"].pop("uid")
        kubectl.apply(body)

        def pods():
            return sorted(p.metadata.name for p in kubelet.core.list_namespaced_pod(ns).items)

        wait_for(lambda: len(pods()) == 3, 60, "3 pods")
        for pod in pods():
            kubelet.set(pod)
        kubelet.set("mnist-worker-0", state="terminated", exit_code=0)

        def items():
            return custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]

        # The TTL (3 s) leaves the Succeeded job in view for many polls before it goes.
        wait_for(
            lambda: (i := items()) and st.state(i[0].get("status") or {}) == "Succeeded",
            60,
            "the job to succeed",
        )
        wait_for(lambda: not items(), 60, "the job to be deleted by its TTL")
        events = kubectl("get", "events", "-n", ns, "-o", "json")
        assert "TFJobSucceeded" in events, "events were written too"
        # An RBAC denial names the user; other 403s (a namespace being deleted) do not.
        denials = restricted.denials("system:serviceaccount:tfjob-system:tfjob-operator")
        assert denials == [], denials[:3]
        lease = kubectl.get_json("lease", "tfjob-operator-leader", "-n", "tfjob-system")
        assert lease["spec"]["holderIdentity"], "the restricted operator took the Lease"


def test_every_example_runs_through_the_operator(crd, kubectl, apps, custom, ns, operator):
    """Each shipped example, as written (integer GPU counts included), gets its StatefulSets."""
    examples = sorted((ROOT / "manifests" / "examples").glob("*.yaml"))
    kubectl("apply", "-n", ns, "-f", str(ROOT / "manifests" / "examples"))
    for path in examples:
        body = yaml.safe_load(path.read_text())
        name = body["metadata"]["name"]
        want = {
            f"{name}-{rt.lower()}": rs.get("replicas", 1)
            for rt, rs in body["spec"]["tfReplicaSpecs"].items()
        }

        def statefulsets(name=name):
            sel = f"tfjob.dev/job-name={name}"
            items = apps.list_namespaced_stateful_set(ns, label_selector=sel).items
            return {s.metadata.name: s.spec.replicas for s in items}

        got = wait_for(lambda w=want, f=statefulsets: f() == w and f(), 60, f"{path.name}: {want}")
        assert got == want
        # The status is written after the children are applied: wait for it too.
        status = wait_for(
            lambda name=name: custom.get_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, name
            ).get("status"),
            60,
            f"{path.name}: a status",
        )
        assert st.find(status, "Failed") is None, status
        assert st.find(status, "Created")["status"] == "True"


def test_kubeflow_manifests_are_the_same_install_for_kubeflows_group(kubectl):
    """manifests/kubeflow/ is the alternative install (same names, so one or the other): the
    API server takes it in one go, its operator serves kubeflow.org, its rules grant that."""
    folder = ROOT / "manifests" / "kubeflow"
    out = kubectl("apply", "--dry-run=server", "-f", str(folder))
    assert "tfjobs.kubeflow.org" in out and "deployment.apps/tfjob-operator" in out
    docs = [d for f in sorted(folder.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text())]
    (deployment,) = [d for d in docs if d and d["kind"] == "Deployment"]
    assert (
        "--api-group=kubeflow.org"
        in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    (role,) = [d for d in docs if d and d["kind"] == "ClusterRole"]
    groups = {g for rule in role["rules"] for g in rule["apiGroups"]}
    assert "kubeflow.org" in groups and GROUP not in groups
