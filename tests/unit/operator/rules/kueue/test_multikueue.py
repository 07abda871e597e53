"""MultiKueue, both ends: the manager's job (its Workload only, `spec.managedBy` defaulted as
Kueue's webhook defaults it), and the worker's copy (the Workload Kueue made for it taken as
the job's, never one of its own). Kueue's part is played by writing its objects as it does
(`pkg/controller/admissionchecks/multikueue`, `jobframework`)."""

from __future__ import annotations

import copy
import json

import pytest

from tests.unit.operator.rules.kueue import played as kq
from tests.unit.operator.rules.kueue.test_workload import FLAVORS, admit, made, queued_job
from tests.unit.operator.rules.lifecycle.decide_run import Run
from tfjob_operator.api.spec import MULTIKUEUE
from tfjob_operator.rules import handover, kueue
from tfjob_operator.rules import status as st
from tfjob_operator.rules.children import build
from tfjob_operator.rules.kueue import multikueue as mk
from tfjob_operator.rules.kueue.admission import observe_workload
from tfjob_operator.rules.kueue.queue import QueueView
from tfjob_operator.rules.lifecycle import JobView
from tfjob_operator.rules.lifecycle.suspension import dispatched_workload
from tfjob_testbed.core.jobs import pod

MK_CHECK = {"metadata": {"name": "mk"}, "spec": {"controllerName": MULTIKUEUE}}
PROV_CHECK = {
    "metadata": {"name": "prov"},
    "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"},
}


def _with(body, *, spec=None, status=None, annotations=None, labels=None):
    body = copy.deepcopy(body)
    body["spec"].update(spec or {})
    if status is not None:
        body["status"] = status
    body["metadata"].setdefault("annotations", {}).update(annotations or {})
    body["metadata"].setdefault("labels", {}).update(labels or {})
    return body


NEW = queued_job()


@pytest.mark.parametrize(
    "body, checks, defaults",
    [
        (NEW, [MK_CHECK], True),
        (NEW, [PROV_CHECK, MK_CHECK], True),
        (NEW, [PROV_CHECK], False),
        (NEW, [], False),
        (NEW, [None], False),  # an AdmissionCheck the ClusterQueue names, not there
        # started already: it runs where it is
        (_with(NEW, status={"conditions": [{"type": "Created"}]}), [MK_CHECK], False),
        # the user's own choice stands
        (_with(NEW, spec={"managedBy": "example.com/mine"}), [MK_CHECK], False),
        (_with(NEW, spec={"runPolicy": {"managedBy": MULTIKUEUE}}), [MK_CHECK], False),
        # a copy MultiKueue made on a worker (whose queue may dispatch further): never
        (_with(NEW, annotations={mk.PREBUILT_WORKLOAD: "wl"}), [MK_CHECK], False),
        (_with(NEW, labels={mk.PREBUILT_WORKLOAD: "wl"}), [MK_CHECK], False),
    ],
)
def test_managed_by_defaults_as_kueues_webhook_defaults_it(body, checks, defaults):
    assert mk.defaults_to_multikueue(body, checks) is defaults


def test_a_cluster_queue_names_its_checks_both_ways():
    cq = {
        "spec": {
            "admissionChecks": ["mk"],
            "admissionChecksStrategy": {"admissionChecks": [{"name": "prov"}, {"name": "mk"}]},
        }
    }
    assert mk.admission_checks(cq) == ["mk", "prov"]
    assert mk.admission_checks(None) == []


@pytest.mark.parametrize(
    "meta, name",
    [
        ({"annotations": {mk.PREBUILT_WORKLOAD: "a"}, "labels": {mk.PREBUILT_WORKLOAD: "b"}}, "a"),
        ({"labels": {mk.PREBUILT_WORKLOAD: "b"}}, "b"),  # Kueue before v0.18
        ({"annotations": {mk.PREBUILT_WORKLOAD: ""}}, None),
        ({}, None),
    ],
)
def test_the_prebuilt_workload_is_read_annotation_first(meta, name):
    assert mk.prebuilt_name(meta) == name


@pytest.mark.parametrize(
    "spec, elsewhere, dispatched",
    [
        ({}, None, False),
        ({"managedBy": MULTIKUEUE}, None, True),
        ({"managedBy": "tfjob.dev/tfjob-operator"}, None, False),
        ({"managedBy": "kubeflow.org/training-operator"}, None, False),
        ({"managedBy": "example.com/mine"}, "example.com/mine", False),
        # Kueue's built-in kubeflow.org integration: the manager's job is Kueue's alone
        ({"runPolicy": {"managedBy": MULTIKUEUE}}, MULTIKUEUE, False),
        ({"managedBy": MULTIKUEUE, "runPolicy": {"managedBy": "x.io/y"}}, None, True),
    ],
)
def test_which_controller_runs_a_job(spec, elsewhere, dispatched):
    assert handover.managed_elsewhere(spec) == elsewhere
    assert mk.dispatched(spec) is dispatched


# -- the manager: the Workload only


def manager_view(body):
    view = JobView.from_body(body)
    assert view.spec is not None
    return view, build(view.ref, view.spec, "cluster.local")


def test_the_managers_job_gets_its_workload_and_keeps_it_up_to_date_while_it_waits():
    body = _with(NEW, spec={"managedBy": MULTIKUEUE})
    body["metadata"]["uid"] = "uid-m"
    _, built = manager_view(body)
    queue = QueueView("team-a", "v1beta2")
    first = dispatched_workload(built, queue, {}, False)
    assert first.create is not None and first.status_patch == {} and first.delete is None
    owner = first.create["metadata"]["ownerReferences"][0]
    assert owner["controller"] is True and owner["uid"] == "uid-m"  # Kueue finds the job so
    stored = json.loads(json.dumps(first.create)) | {"status": {}}
    stored["metadata"]["resourceVersion"] = "1"
    same = dispatched_workload(
        built, QueueView("team-a", "v1beta2", observe_workload(stored)), {}, False
    )
    assert same.create is None and same.update == {} and same.status_patch == {}
    # a suspend while it waits: deactivated in place
    held = dispatched_workload(
        built, QueueView("team-a", "v1beta2", observe_workload(stored)), {}, True
    )
    assert held.update["spec"] == {"active": False}


def test_the_managers_admitted_workload_is_never_replaced_and_its_status_never_written():
    body = _with(NEW, spec={"managedBy": MULTIKUEUE})
    _, built = manager_view(body)
    wl = dispatched_workload(built, QueueView("team-a", "v1beta2"), {}, False).create
    admitted = admit(wl)
    # the user edits the replica count on the manager: the worker runs the copy it has
    bigger = _with(body, spec={})
    bigger["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 5
    _, built2 = manager_view(bigger)
    d = dispatched_workload(
        built2, QueueView("team-a", "v1beta2", observe_workload(admitted)), {}, False
    )
    assert d.create is None and d.delete is None and d.status_patch == {}
    assert "podSets" not in (d.update.get("spec") or {})
    # finished: Kueue copied the worker's status here and finished the Workload
    done = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    finished = copy.deepcopy(admitted)
    finished["status"]["conditions"].append(kq.cond("Finished", True, "Succeeded"))
    for wl_seen in (observe_workload(finished), None):
        d = dispatched_workload(built, QueueView("team-a", "v1beta2", wl_seen), done, False)
        assert (d.create, d.update, d.status_patch, d.delete) == (None, {}, {}, None)


# -- the worker: the prebuilt Workload


def copied(body, wl):
    """What MultiKueue makes on a worker from the manager's job and Workload."""
    job = _with(body, annotations={mk.PREBUILT_WORKLOAD: wl["metadata"]["name"]})
    job["metadata"]["labels"][mk.ORIGIN_LABEL] = "manager"
    job["metadata"]["uid"] = "uid-w"
    job["spec"].pop("managedBy", None)
    remote = {
        "apiVersion": wl["apiVersion"],
        "kind": "Workload",
        "metadata": {
            "name": wl["metadata"]["name"],
            "namespace": wl["metadata"]["namespace"],
            "resourceVersion": "5",
            "labels": {
                k: v for k, v in wl["metadata"]["labels"].items() if k != kueue.JOB_UID_LABEL
            }
            | {mk.ORIGIN_LABEL: "manager"},
            "annotations": dict(wl["metadata"]["annotations"]),
        },
        "spec": copy.deepcopy(wl["spec"]),
    }
    return job, remote


def manager_workload(body):
    _, built = manager_view(_with(body, spec={"managedBy": MULTIKUEUE}))
    wl = dispatched_workload(built, QueueView("team-a", "v1beta2"), {}, False).create
    return json.loads(json.dumps(wl))


def worker_queue(remote):
    seen = observe_workload(remote) if remote else None
    return QueueView("team-a", "v1beta2", seen, FLAVORS, prebuilt=True)


def test_the_worker_waits_for_the_prebuilt_workload_and_makes_none():
    job, _ = copied(NEW, manager_workload(NEW))
    run = Run(job)
    d = run.step(queue=worker_queue(None))
    assert d.workload is not None and d.workload.create is None
    assert (st.is_true(d.status, st.Cond.SUSPENDED) and not d.children) or all(
        c["spec"].get("replicas", 0) == 0 for c in d.children if c["kind"] == "StatefulSet"
    )


def test_the_worker_takes_the_prebuilt_workload_then_runs_when_it_is_admitted():
    job, remote = copied(NEW, manager_workload(NEW))
    run = Run(job)
    d = run.step(queue=worker_queue(remote))
    # taken first, as Kueue's jobframework takes one: its controller, and the job-uid label
    patch = d.workload.update
    assert patch["metadata"]["ownerReferences"][0]["uid"] == "uid-w"
    assert patch["metadata"]["ownerReferences"][0]["controller"] is True
    assert patch["metadata"]["labels"] == {kueue.JOB_UID_LABEL: "uid-w"}
    assert patch["metadata"]["resourceVersion"] == "5"
    assert d.workload.create is None and d.workload.delete is None
    owned = copy.deepcopy(remote)
    owned["metadata"]["ownerReferences"] = patch["metadata"]["ownerReferences"]
    admitted = admit(owned, flavor="a100", rv="6")
    d = run.step(queue=worker_queue(admitted))
    assert not st.is_true(d.status, st.Cond.SUSPENDED)
    assert d.workload.update == {} and d.workload.create is None and d.workload.delete is None
    sets = {c["metadata"]["name"]: c for c in d.children if c["kind"] == "StatefulSet"}
    assert sets["mnist-worker"]["spec"]["replicas"] == 2
    # its end: the prebuilt Workload Finished, for the manager to copy the status and finish
    # its own
    chief = pod("mnist", "chief", 0, state="terminated", exit_code=0)
    d = run.step(chief, queue=worker_queue(admitted))
    assert st.is_true(d.status, st.Cond.SUCCEEDED)
    finished = [
        c for c in d.workload.status_patch["status"]["conditions"] if c["type"] == "Finished"
    ]
    assert finished[0]["status"] == "True" and finished[0]["reason"] == "Succeeded"


def test_a_prebuilt_workload_that_asks_otherwise_is_finished_out_of_sync_never_replaced():
    job, remote = copied(NEW, manager_workload(NEW))
    remote["metadata"]["ownerReferences"] = [
        {"apiVersion": "tfjob.dev/v1", "kind": "TFJob", "name": "mnist", "uid": "uid-w",
         "controller": True}
    ]  # fmt: skip
    remote["spec"]["podSets"][0]["count"] = 7
    remote["metadata"]["annotations"][kueue.ADMISSION_HASH] = "another"
    d = Run(job).step(queue=worker_queue(admit(remote)))
    assert d.workload.create is None and d.workload.delete is None and d.workload.update == {}
    (cond,) = [
        c for c in d.workload.status_patch["status"]["conditions"] if c["type"] == "Finished"
    ]
    assert cond["reason"] == mk.OUT_OF_SYNC and cond["status"] == "True"


def test_a_prebuilt_workload_another_object_controls_is_not_taken():
    _, remote = copied(NEW, manager_workload(NEW))
    remote["metadata"]["ownerReferences"] = [{"uid": "other", "controller": True}]
    assert mk.taken(observe_workload(remote), "uid-w")
    assert not mk.taken(observe_workload(remote), "other")
    del remote["metadata"]["ownerReferences"]
    assert not mk.taken(observe_workload(remote), "uid-w")


def test_made_helper_is_the_workload_the_decision_asked_for():
    """The manager's Workload is the one a job without MultiKueue asks with: one podSet per
    replica type, as the worker's operator computes it."""
    run = Run(queued_job())
    run.step(queue=QueueView("team-a", "v1beta2"))
    ordinary = made(run)
    dispatched = manager_workload(NEW)
    assert dispatched["spec"]["podSets"] == ordinary["spec"]["podSets"]
    assert (
        dispatched["metadata"]["annotations"][kueue.ADMISSION_HASH]
        == ordinary["metadata"]["annotations"][kueue.ADMISSION_HASH]
    )
