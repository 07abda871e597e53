"""MultiKueue's two ends on the real API server, with Kueue's CRDs from its release's module and
no Kueue running: Kueue's part (its AdmissionCheck, the Workload it makes on a worker, its
admission) is written as Kueue writes it. The CRD's rule on `spec.managedBy`; on a manager, a
job whose LocalQueue dispatches with MultiKueue gets the field and its Workload, nothing else;
on a worker, the copy takes the Workload Kueue made for it. Kueue itself, across a manager and
two workers: tests/node/test_multikueue_clusters.py."""

from __future__ import annotations

import json

import kubernetes
import pytest

from tests.integration.test_kueue import queued_job, the_workload, workloads
from tests.integration.user_view import CHILD_WAIT
from tfjob_operator.api.spec import GROUP, MULTIKUEUE, PLURAL, VERSION
from tfjob_operator.rules import kueue
from tfjob_operator.rules import status as st
from tfjob_operator.rules.kueue import multikueue as mk
from tfjob_testbed.addons import kueue_install as kq
from tfjob_testbed.addons import multikueue_install
from tfjob_testbed.core.kube import wait_for

pytestmark = pytest.mark.integration
KV = "v1beta2"


def _refused(call) -> str:
    with pytest.raises(kubernetes.client.ApiException) as e:
        call()
    assert e.value.status == 422, e.value.body
    return json.loads(e.value.body)["message"]


@pytest.mark.smoke
def test_managed_by_is_set_once_before_the_job_starts_and_never_changes(operator, custom, ns):
    """The CRD's rule, as the API server applies it (no operator involved: a job of a group
    no operator here serves would do the same)."""

    def patch(name, body, status=False):
        call = (
            custom.patch_namespaced_custom_object_status
            if status
            else (custom.patch_namespaced_custom_object)
        )
        return call(GROUP, VERSION, ns, PLURAL, name, body)

    def create(name, **spec):
        body = queued_job(name)
        body["metadata"]["namespace"] = ns
        body["spec"].update(spec)
        # `runPolicy.suspend`: the operator (it watches every namespace) keeps its hands off
        body["spec"]["runPolicy"] = {"managedBy": "example.com/elsewhere"}
        return custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)

    create("given", managedBy=MULTIKUEUE)
    message = _refused(lambda: patch("given", {"spec": {"managedBy": "example.com/other"}}))
    assert "spec.managedBy is immutable" in message
    assert "immutable" in _refused(lambda: patch("given", {"spec": {"managedBy": None}}))
    # unset, before any status: set once (as the operator defaults it)
    create("later")
    patch("later", {"spec": {"managedBy": MULTIKUEUE}})
    # unset, once a status exists: it stays unset
    create("started")
    patch("started", {"status": {"conditions": []}, "restarts": 0}, status=True)
    assert "immutable" in _refused(lambda: patch("started", {"spec": {"managedBy": MULTIKUEUE}}))


@pytest.fixture
def multikueue_queue(kueue_crds, custom, ns):
    """A LocalQueue `team-a` whose ClusterQueue dispatches with MultiKueue, as a manager
    cluster's admin makes them (the MultiKueueConfig itself is not read by the operator)."""
    check = multikueue_install.admission_check(f"mk-{ns}", "workers")
    cq = kq.cluster_queue(
        f"cq-{ns}",
        {"on-demand": {"cpu": "10"}},
        admissionChecksStrategy={"admissionChecks": [{"name": f"mk-{ns}"}]},
    )
    for plural, body in (("admissionchecks", check), ("clusterqueues", cq)):
        custom.create_cluster_custom_object(kueue.GROUP, KV, plural, body)
    lq = kq.local_queue("team-a", ns, f"cq-{ns}")
    custom.create_namespaced_custom_object(kueue.GROUP, KV, ns, "localqueues", lq)
    yield
    for plural, name in (("clusterqueues", f"cq-{ns}"), ("admissionchecks", f"mk-{ns}")):
        custom.delete_cluster_custom_object(kueue.GROUP, KV, plural, name)


def test_on_a_manager_a_job_gets_managed_by_and_its_workload_and_nothing_else(
    multikueue_queue, kueue_operator, job, custom, ns
):
    name = job.create(queued_job())
    wait_for(lambda: job.get(name)["spec"].get("managedBy") == MULTIKUEUE, CHILD_WAIT,
             "spec.managedBy defaulted")  # fmt: skip
    wl = the_workload(custom, ns)
    (owner,) = wl["metadata"]["ownerReferences"]
    # Kueue finds the job from the Workload's controller
    assert (owner["kind"], owner["name"], owner["controller"]) == ("TFJob", name, True)
    assert owner["uid"] == job.get(name)["metadata"]["uid"]
    job.wait_event(name, st.Reason.DISPATCHED)
    # Kueue admits it (quota and MultiKueue's check): it runs on a worker, not here
    admitted = wl | {
        "status": {
            "conditions": [
                {"type": t, "status": "True", "reason": "R", "message": "",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
                for t in ("QuotaReserved", "Admitted")
            ],
            "admission": {
                "clusterQueue": f"cq-{ns}",
                "podSetAssignments": [
                    {"name": p["name"], "flavors": {"cpu": "on-demand"}, "count": p["count"]}
                    for p in wl["spec"]["podSets"]
                ],
            },
        }
    }  # fmt: skip
    custom.replace_namespaced_custom_object_status(
        kueue.GROUP, KV, ns, "workloads", wl["metadata"]["name"], admitted
    )
    # Kueue copies the worker's status: the operator writes none, makes no child
    copied = {"conditions": [{"type": "Created", "status": "True", "reason": "Copied",
                              "message": "from the worker",
                              "lastTransitionTime": "2026-01-01T00:00:00Z"}]}  # fmt: skip
    custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, PLURAL, name, {"status": copied}
    )
    job.wait_event(name, st.Reason.DISPATCHED)
    stored = job.get(name)
    assert stored["status"] == copied
    assert job.statefulsets(name) == {} and job.services(name) == {}
    assert len(workloads(custom, ns)) == 1


def test_a_job_made_with_managed_by_on_a_plain_queue_is_dispatched_too(
    kueue_crds, kueue_operator, job, custom, ns
):
    """The user's own `spec.managedBy` (no MultiKueue check on the queue: Kueue would never
    dispatch it, but the operator takes the field as written)."""
    body = queued_job()
    body["spec"]["managedBy"] = MULTIKUEUE
    name = job.create(body)
    the_workload(custom, ns)
    job.wait_event(name, st.Reason.DISPATCHED)
    assert job.statefulsets(name) == {}
    assert "conditions" not in (job.get(name).get("status") or {})


def test_on_a_worker_the_copy_takes_the_workload_kueue_made_for_it(
    kueue_crds, kueue_operator, job, custom, ns
):
    """MultiKueue made the Workload first (no owner), then the job, naming it."""
    body = queued_job()
    prebuilt = "tfjob-mnist-from-the-manager"
    labels = {"tfjob.dev/job-name": "mnist", "app.kubernetes.io/managed-by": "tfjob-operator",
              mk.ORIGIN_LABEL: "multikueue"}  # fmt: skip
    # The manager's Workload, as this operator builds it there: the same job, another uid
    made = kueue_operator_workload(body)
    made["metadata"] = {
        "name": prebuilt,
        "namespace": ns,
        "labels": labels,
        "annotations": made["metadata"]["annotations"],
    }
    custom.create_namespaced_custom_object(kueue.GROUP, KV, ns, "workloads", made)
    body["metadata"]["annotations"] = {mk.PREBUILT_WORKLOAD: prebuilt}
    body["metadata"]["labels"][mk.ORIGIN_LABEL] = "multikueue"
    name = job.create(body)
    uid = job.get(name)["metadata"]["uid"]

    def taken():
        wl = custom.get_namespaced_custom_object(kueue.GROUP, KV, ns, "workloads", prebuilt)
        owners = wl["metadata"].get("ownerReferences") or []
        return [o for o in owners if o.get("controller") and o["uid"] == uid] and wl

    wl = wait_for(taken, CHILD_WAIT, "the prebuilt Workload taken by the job")
    assert wl["metadata"]["labels"][kueue.JOB_UID_LABEL] == uid
    job.wait_condition(name, st.Cond.SUSPENDED)
    assert [w["metadata"]["name"] for w in workloads(custom, ns)] == [prebuilt], "none of its own"
    assert {s.spec.replicas for s in job.statefulsets(name).values()} <= {0}


def kueue_operator_workload(body: dict) -> dict:
    """The Workload this operator builds for `body` (as the manager's operator did)."""
    from tfjob_operator.rules.children import build
    from tfjob_operator.rules.kueue.queue import QueueView
    from tfjob_operator.rules.lifecycle import JobView
    from tfjob_operator.rules.lifecycle.suspension import wanted_workload

    body = json.loads(json.dumps(body))
    body["metadata"].setdefault("namespace", "default")
    body["metadata"]["uid"] = "uid-on-the-manager"
    view = JobView.from_body(body)
    assert view.spec is not None
    return wanted_workload(build(view.ref, view.spec, "cluster.local"), QueueView("team-a", KV))
