"""Kueue on the real API server, with Kueue's own Workload and ResourceFlavor CRDs (v0.19.2) and
the test playing Kueue's part: it writes the Workload's status as Kueue's scheduler and
Workload controller do. (The same cycle with a training job on real nodes:
tests/node/test_kueue.py.)

The order matters: the first test runs before the CRDs exist and installs them."""

from __future__ import annotations

import json

import kubernetes
import pytest

from tests.integration.helpers import CHILD_WAIT, GC_WAIT
from tfjob_operator.rules import kueue
from tfjob_operator.rules import status as st
from tfjob_testbed import kueue as kq
from tfjob_testbed.jobs import tfjob
from tfjob_testbed.kube import wait_for
from tfjob_testbed.operator import stepped_aside

pytestmark = pytest.mark.integration

VERSION = "v1beta2"
TAINT = {"key": "pool", "operator": "Equal", "value": "spot", "effect": "NoSchedule"}
FLAVORS = {
    "on-demand": {"nodeLabels": {"pool": "on-demand"}},
    "spot": {"nodeLabels": {"pool": "spot"}, "tolerations": [TAINT]},
}


def queued_job(name: str = "mnist") -> dict:
    body = tfjob(
        name=name,
        replicas={"Chief": 1, "Worker": 2},
        restart_policy="OnFailure",
        checkpoint={"storage": {"size": "1Gi"}},
    )
    body["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team-a"}
    for rs in body["spec"]["tfReplicaSpecs"].values():
        rs["template"]["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": 1, "memory": "1Gi"}
        }
    return body


def workloads(custom, ns: str) -> list[dict]:
    return custom.list_namespaced_custom_object(kueue.GROUP, VERSION, ns, "workloads")["items"]


def the_workload(custom, ns: str) -> dict:
    return wait_for(lambda: (workloads(custom, ns) or [None])[0], CHILD_WAIT, "the Workload")


def workload_with(custom, ns: str, type_: str) -> dict:
    """The Workload, once its condition `type_` holds."""

    def check() -> dict | None:
        wl = the_workload(custom, ns)
        return wl if kq.condition(wl, type_).get("status") == "True" else None

    return wait_for(check, CHILD_WAIT, f"the Workload's {type_}")


def kueue_writes(custom, ns: str, name: str, status: dict) -> None:
    """Kueue's write of the Workload's status (`kq.status_write`)."""
    current = custom.get_namespaced_custom_object(kueue.GROUP, VERSION, ns, "workloads", name)
    body = kq.status_write(current, status)
    custom.patch_namespaced_custom_object_status(kueue.GROUP, VERSION, ns, "workloads", name, body)


def admit(custom, ns: str, workload: dict, flavor: str, updates: list | None = None) -> None:
    """Kueue's scheduler admits the Workload on `flavor`, for every resource of every podSet."""
    status = kq.admission(workload, flavor, updates)
    kueue_writes(custom, ns, workload["metadata"]["name"], status)


def placed(job, name: str, flavor: str) -> bool:
    """Every StatefulSet of the job runs its pods, placed on `flavor` (its node label)."""
    sets = job.statefulsets(name)
    pools = {(s.spec.template.spec.node_selector or {}).get("pool") for s in sets.values()}
    return bool(sets) and pools == {flavor} and all(s.spec.replicas > 0 for s in sets.values())


def test_without_kueue_a_queued_job_says_so_and_runs_nothing(
    operator, control_plane, kubectl, job, tmp_path
):
    if kubectl.run("get", "crd", "workloads.kueue.x-k8s.io", check=False).returncode == 0:
        pytest.skip("Kueue's CRDs are installed already (this test runs first in the module)")
    with stepped_aside(operator, control_plane.kubeconfig, tmp_path / "op.log", ["--kueue"]):
        name = job.create(queued_job())
        error = job.wait_condition(name, st.Cond.RECONCILE_ERROR, timeout=30)
        assert error["status"] == "True"
        assert "Kueue is not installed" in error["message"] and "team-a" in error["message"]
        job.wait_event(name, st.Reason.RECONCILE_ERROR)
        assert job.statefulsets(name) == {}, "nothing runs outside the queue"


@pytest.fixture(scope="module")
def kueue_crds(kubectl, custom):
    docs = kq.crd_documents()
    created = kubectl.run("create", "--validate=false", "-f", "-", input=docs, check=False)
    assert created.returncode == 0 or "AlreadyExists" in created.stderr, created.stderr
    kubectl.wait_established(*kq.CRD_NAMES)
    for name, spec in FLAVORS.items():
        body = kq.flavor(name, spec)
        try:
            custom.create_cluster_custom_object(kueue.GROUP, VERSION, "resourceflavors", body)
        except kubernetes.client.ApiException as e:
            if e.status != 409:
                raise


@pytest.fixture
def kueue_operator(kueue_crds, operator, control_plane, tmp_path):
    with stepped_aside(operator, control_plane.kubeconfig, tmp_path / "op.log", ["--kueue"]) as op:
        yield op


def test_queued_admitted_evicted_readmitted_finished(
    kueue_operator, job, custom, core, kubelet, ns
):
    name = job.create(queued_job())

    # Queued: a Workload as Kueue reads it, and no pod.
    workload = the_workload(custom, ns)
    wl_name = workload["metadata"]["name"]
    owner = workload["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("TFJob", name, True)
    assert workload["spec"]["queueName"] == "team-a"
    sets = {p["name"]: p for p in workload["spec"]["podSets"]}
    assert {n: p["count"] for n, p in sets.items()} == {"chief": 1, "worker": 2}
    container = sets["worker"]["template"]["spec"]["containers"][0]
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert {"TF_CONFIG", "TFJOB_CHECKPOINT_DIR"} <= {e["name"] for e in container["env"]}
    suspended = job.wait_condition(name, st.Cond.SUSPENDED)
    assert (suspended["status"], suspended["reason"]) == ("True", st.Reason.QUEUED)
    waiting = job.status(name)["waiting"]
    assert set(waiting) == {"mnist-chief-0", "mnist-worker-0", "mnist-worker-1"}
    assert all(w.startswith("Queued: ") and "team-a" in w for w in waiting.values())
    job.wait_event(name, st.Reason.QUEUED)
    assert {s.spec.replicas for s in job.statefulsets(name).values()} == {0}
    assert job.pods(name) == []
    claim = core.read_namespaced_persistent_volume_claim("mnist-checkpoints", ns).metadata.uid

    # Admitted on on-demand, with an admission check's pod set update: the pods start there.
    update = {"name": "worker", "labels": {"provisioned": "yes"}, "nodeSelector": {"zone": "z1"}}
    admit(custom, ns, workload, "on-demand", [update])
    wait_for(lambda: placed(job, name, "on-demand"), CHILD_WAIT, "pods on on-demand")
    worker = job.statefulsets(name)["mnist-worker"].spec.template
    assert worker.spec.node_selector == {"pool": "on-demand", "zone": "z1"}
    assert worker.metadata.labels["provisioned"] == "yes"
    assert "zone" not in (job.statefulsets(name)["mnist-chief"].spec.template.spec.node_selector)
    pods = job.wait_pods(name, 3)
    kubelet.run_all(pods)
    job.wait_state(name, "Running")
    assert job.condition(name, st.Cond.SUSPENDED)["reason"] == st.Reason.ADMITTED
    ready = workload_with(custom, ns, "PodsReady")
    assert kq.condition(ready, "PodsReady")["reason"] == "Started"

    # Preempted: the job stops, then the reservation is given back.
    kueue_writes(custom, ns, wl_name, kq.PREEMPTION)
    wait_for(lambda: job.pods(name) == [], CHILD_WAIT, "the pods to stop")
    assert {s.spec.replicas for s in job.statefulsets(name).values()} == {0}
    given_back = wait_for(
        lambda: (
            (wl := the_workload(custom, ns)).get("status", {}).get("admission") is None
            and kq.condition(wl, "QuotaReserved").get("status") == "False"
            and wl
        ),
        CHILD_WAIT,
        "the reservation given back",
    )
    assert kq.condition(given_back, "QuotaReserved")["reason"] == "Pending"
    assert kq.condition(given_back, "Admitted")["status"] == "False"
    assert (
        kq.condition(given_back, "Requeued")["status"],
        kq.condition(given_back, "Requeued")["reason"],
    ) == (
        "True",
        "Preempted",
    )
    evicted = job.condition(name, st.Cond.SUSPENDED)
    assert (evicted["status"], evicted["reason"]) == ("True", st.Reason.EVICTED)
    job.wait_event(name, st.Reason.EVICTED)
    assert job.status(name).get("restarts", 0) == 0, "a preemption is no failure"

    # Admitted again, on spot: the pods come back there, with the same checkpoint volume.
    admit(custom, ns, given_back, "spot")
    wait_for(lambda: placed(job, name, "spot"), CHILD_WAIT, "pods on spot")
    worker = job.statefulsets(name)["mnist-worker"].spec.template.spec
    assert [(t.key, t.value, t.effect) for t in worker.tolerations or []] == [
        ("pool", "spot", "NoSchedule")
    ]
    pods = job.wait_pods(name, 3)
    assert (
        core.read_namespaced_persistent_volume_claim("mnist-checkpoints", ns).metadata.uid == claim
    )
    kubelet.run_all(pods)
    job.wait_state(name, "Running")

    # Finished: the Workload says so, and its quota frees.
    kubelet.set("mnist-chief-0", state="terminated", exit_code=0)
    job.wait_state(name, "Succeeded")
    finished = workload_with(custom, ns, "Finished")
    assert kq.condition(finished, "Finished")["reason"] == "Succeeded"
    assert len(workloads(custom, ns)) == 1, "one Workload all along"

    # The TFJob's deletion takes its Workload with it.
    job.kubectl("delete", job.resource, name, "-n", ns)
    wait_for(lambda: workloads(custom, ns) == [], GC_WAIT, "the Workload to go with the job")


def test_a_spec_edit_while_queued_replaces_the_workload(kueue_operator, job, custom, ns):
    name = job.create(queued_job())
    old = the_workload(custom, ns)
    # The user's manifest, edited: no resourceVersion, which would make the apply conflict with
    # the operator's status writes meanwhile.
    body = {k: v for k, v in job.get(name).items() if k != "status"}
    body["metadata"] = {k: body["metadata"][k] for k in ("name", "namespace", "labels")}
    body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3
    job.kubectl.apply(body)
    new = wait_for(
        lambda: [
            w for w in workloads(custom, ns) if w["metadata"]["uid"] != old["metadata"]["uid"]
        ],
        CHILD_WAIT,
        "a new Workload",
    )[0]
    assert {p["name"]: p["count"] for p in new["spec"]["podSets"]} == {"chief": 1, "worker": 3}
    wait_for(lambda: len(workloads(custom, ns)) == 1, CHILD_WAIT, "the stale Workload gone")
    assert {s.spec.replicas for s in job.statefulsets(name).values()} == {0}


def test_an_older_kueue_that_serves_only_v1beta1(
    kueue_crds, operator, control_plane, kubectl, job, custom, ns, tmp_path
):
    """Where Kueue serves only v1beta1, the Workload is written in it, with the priority as
    v1beta1 names it."""
    crd = json.loads(kubectl("get", "crd", "workloads.kueue.x-k8s.io", "-o", "json"))
    names = [v["name"] for v in crd["spec"]["versions"]]

    def serve(only: str | None) -> None:
        ops = []
        for i, version in enumerate(names):
            keep = only is None or version == only
            storage = version == (only or VERSION)
            ops += [
                {"op": "replace", "path": f"/spec/versions/{i}/served", "value": keep},
                {"op": "replace", "path": f"/spec/versions/{i}/storage", "value": storage},
            ]
        kubectl("patch", "crd", "workloads.kueue.x-k8s.io", "--type=json", "-p", json.dumps(ops))

    def served(version: str) -> bool:
        try:
            return any(
                r.name == "workloads"
                for r in custom.get_api_resources(kueue.GROUP, version).resources
            )
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return False
            raise

    priority_class = f"research-{ns}"
    kubectl("create", "priorityclass", priority_class, "--value=1000")
    serve("v1beta1")
    try:
        wait_for(lambda: not served(VERSION), CHILD_WAIT, "v1beta2 no longer served")
        with stepped_aside(operator, control_plane.kubeconfig, tmp_path / "op.log", ["--kueue"]):
            body = queued_job()
            body["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": priority_class}}
            name = job.create(body)
            items = wait_for(
                lambda: custom.list_namespaced_custom_object(
                    kueue.GROUP, "v1beta1", ns, "workloads"
                )["items"],
                CHILD_WAIT,
                "a v1beta1 Workload",
            )
            spec = items[0]["spec"]
            assert spec["priorityClassName"] == priority_class
            assert spec["priorityClassSource"] == "scheduling.k8s.io/priorityclass"
            assert spec["priority"] == 1000
            assert job.wait_condition(name, st.Cond.SUSPENDED)["reason"] == st.Reason.QUEUED
    finally:
        serve(None)
        kubectl("delete", "priorityclass", priority_class)
        wait_for(lambda: served(VERSION), CHILD_WAIT, "v1beta2 served again")


def test_a_job_taken_out_of_its_queue_runs_and_keeps_no_workload(kueue_operator, job, custom, ns):
    name = job.create(queued_job())
    the_workload(custom, ns)
    job.kubectl("label", job.resource, name, "-n", ns, f"{kueue.QUEUE_LABEL}-")
    wait_for(lambda: workloads(custom, ns) == [], CHILD_WAIT, "the Workload deleted")
    wait_for(
        lambda: {s.spec.replicas for s in job.statefulsets(name).values()} == {1, 2},
        CHILD_WAIT,
        "the job started without Kueue",
    )
    assert "waiting" not in job.status(name) or not any(
        w.startswith("Queued:") for w in job.status(name)["waiting"].values()
    )
