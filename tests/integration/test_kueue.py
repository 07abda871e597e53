"""The operator's side of Kueue on the real API server, with Kueue's own Workload and
ResourceFlavor CRDs from its release's module and no Kueue running: what the operator writes
before Kueue answers (the Workload, kept in place while it waits; its API version; its removal
when the job leaves the queue). Kueue's answers, from Kueue itself on the real node:
tests/node/test_kueue_itself.py.

The test without Kueue deletes its CRDs first if a test before installed them; the others
install them."""

from __future__ import annotations

import json

import kubernetes
import pytest

from tests.integration.user_view import CHILD_WAIT, without_crds
from tfjob_operator.rules import kueue
from tfjob_operator.rules import status as st
from tfjob_testbed.addons import kueue_install as kq
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.project.operator import stepped_aside

pytestmark = pytest.mark.integration

VERSION = "v1beta2"


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


def test_without_kueue_a_queued_job_says_so_and_runs_nothing(
    operator, control_plane, kubectl, job, tmp_path
):
    without_crds(kubectl, *kq.CRD_NAMES)
    with stepped_aside(operator, control_plane.kubeconfig, tmp_path / "op.log", ["--kueue"]):
        name = job.create(queued_job())
        error = job.wait_condition(name, st.Cond.RECONCILE_ERROR, timeout=30)
        assert error["status"] == "True"
        assert "Kueue is not installed" in error["message"] and "team-a" in error["message"]
        job.wait_event(name, st.Reason.RECONCILE_ERROR)
        assert job.statefulsets(name) == {}, "nothing runs outside the queue"


@pytest.mark.smoke
def test_a_spec_edit_while_queued_updates_the_workload_in_place(kueue_operator, job, custom, ns):
    """The Workload keeps its name, uid and creation time, so the job keeps its place in the
    queue (Kueue orders by creation time)."""
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
            w
            for w in workloads(custom, ns)
            if {p["name"]: p["count"] for p in w["spec"]["podSets"]} == {"chief": 1, "worker": 3}
        ],
        CHILD_WAIT,
        "the Workload updated",
    )[0]
    assert [w["metadata"]["uid"] for w in workloads(custom, ns)] == [old["metadata"]["uid"]]
    assert new["metadata"]["creationTimestamp"] == old["metadata"]["creationTimestamp"]
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
