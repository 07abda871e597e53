"""Kueue: the Workload a queued job asks admission with, and what Kueue's answer does to the job
(held with no pod, placed on the admitted flavors, stopped and given back on eviction, Finished
at the end). Kueue's part is played by writing the Workload's status as Kueue does."""

from __future__ import annotations

import copy
import json

import pytest

from tests.unit.operator.rules.kueue import played as kq
from tests.unit.operator.rules.lifecycle.decide_run import Run, running
from tfjob_operator.api.spec import ReplicaType
from tfjob_operator.controller.projections import job_record
from tfjob_operator.rules import kueue
from tfjob_operator.rules import status as st
from tfjob_operator.rules.children import JobRef
from tfjob_operator.rules.kueue.admission import Flavor, observe_workload
from tfjob_operator.rules.kueue.queue import (
    Priority,
    QueueView,
    priority_class,
)
from tfjob_operator.rules.kueue.workload import workload
from tfjob_operator.rules.lifecycle import JobView, decide, decision
from tfjob_testbed.core.jobs import pod, tfjob

SPEC = {"Chief": 1, "PS": 1, "Worker": 2}
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
FLAVORS = {
    "a100": Flavor.from_body({"spec": {"nodeLabels": {"gpu": "a100"}, "tolerations": [GPU_TAINT]}}),
    "spot": Flavor.from_body({"spec": {"nodeLabels": {"lifecycle": "spot"}}}),
}


def queued_job(**labels):
    body = tfjob(name="mnist", replicas=SPEC)
    body["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team-a", **labels}
    for rs in body["spec"]["tfReplicaSpecs"].values():
        rs["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": 1}}
    return body


def view(run, workload=None, flavors=FLAVORS, version="v1beta2"):
    obs = observe_workload(workload) if workload is not None else None
    return QueueView("team-a", version, obs, flavors)


def made(run):
    """The Workload the last decision asked for, as the API server would store it."""
    return json.loads(json.dumps(run.last.workload.create))


def admit(wl, flavor="a100", updates=None, rv="2"):
    """Kueue's scheduler admits `wl` on `flavor` (and its admission checks are Ready)."""
    wl = json.loads(json.dumps(wl))
    wl["metadata"]["resourceVersion"] = rv
    wl["status"] = {
        "conditions": [kq.cond("QuotaReserved", True, "R"), kq.cond("Admitted", True, "R")],
        "admission": {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": p["name"], "flavors": {"cpu": flavor}} for p in wl["spec"]["podSets"]
            ],
        },
    }
    if updates is not None:
        wl["status"]["admissionChecks"] = [
            {"name": "prov", "state": "Ready", "message": "", "podSetUpdates": updates}
        ]
    return wl


def evict(wl, reason="Preempted"):
    wl = json.loads(json.dumps(wl))
    wl["metadata"]["resourceVersion"] = "3"
    wl["status"]["conditions"].append(kq.cond("Evicted", True, reason, "Preempted to fit cq-b"))
    return wl


def test_a_queued_job_has_a_workload_and_no_pod():
    run = Run(queued_job())
    d = run.step(queue=view(run))
    wl = d.workload.create
    assert wl["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert wl["spec"]["queueName"] == "team-a"
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
        ("chief", 1),
        ("ps", 1),
        ("worker", 2),
    ]
    worker = wl["spec"]["podSets"][2]["template"]
    assert set(worker) == {"metadata", "spec"} and set(worker["metadata"]) <= {
        "labels",
        "annotations",
    }
    container = worker["spec"]["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "1"}}, "an integer quantity as a string"
    assert "TF_CONFIG" in {e["name"] for e in container["env"]}, "the template as rendered"
    owner = wl["metadata"]["ownerReferences"][0]
    assert owner["controller"] is True and owner["name"] == "mnist"
    assert wl["metadata"]["labels"][kueue.JOB_UID_LABEL] == owner["uid"]

    assert set(run.replicas("StatefulSet").values()) == {0}
    assert st.find(run.status, st.Cond.SUSPENDED)["reason"] == st.Reason.QUEUED
    assert set(run.status["waiting"]) == {
        "mnist-chief-0",
        "mnist-ps-0",
        "mnist-worker-0",
        "mnist-worker-1",
    }
    assert all(
        w.startswith("Queued: ") and "LocalQueue team-a" in w
        for w in run.status["waiting"].values()
    )
    assert run.reasons().count(st.Reason.QUEUED) == 1
    assert st.Reason.POD_WAITING not in run.reasons(), "one Event for the job, not one a pod"


def test_kueues_word_is_in_the_waiting_message():
    run = Run(queued_job())
    run.step(queue=view(run))
    wl = made(run)
    wl["status"] = {
        "conditions": [
            kq.cond("QuotaReserved", False, "Pending", "insufficient quota for cpu in flavor a100")
        ]
    }
    run.step(queue=view(run, wl))
    assert "insufficient quota for cpu" in run.status["waiting"]["mnist-worker-1"]


@pytest.mark.parametrize(
    ("version", "labels", "expected"),
    [
        (
            "v1beta2",
            {},
            {
                "priorityClassRef": {
                    "group": "scheduling.k8s.io",
                    "kind": "PriorityClass",
                    "name": "high",
                }
            },
        ),
        (
            "v1beta2",
            {kueue.PRIORITY_LABEL: "urgent"},
            {
                "priorityClassRef": {
                    "group": "kueue.x-k8s.io",
                    "kind": "WorkloadPriorityClass",
                    "name": "urgent",
                }
            },
        ),
        (
            "v1beta1",
            {},
            {"priorityClassName": "high", "priorityClassSource": "scheduling.k8s.io/priorityclass"},
        ),
    ],
)
def test_priority_follows_kueues_choice_of_class(version, labels, expected):
    body = queued_job(**labels)
    body["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": "high"}}
    from tfjob_operator.api.spec import parse_spec

    group, name = priority_class(body["metadata"]["labels"], parse_spec(body["spec"]))
    priority = Priority(group, name, 1000)
    ref = JobRef("mnist", "default", "uid-1")
    wl = workload(ref, version, "team-a", [], priority)
    assert {k: v for k, v in wl["spec"].items() if k.startswith("priorityClass")} == expected
    assert wl["spec"]["priority"] == 1000


def test_admission_places_each_replica_type_and_starts_the_job():
    run = Run(queued_job())
    run.step(queue=view(run))
    updates = [{"name": "worker", "labels": {"prov": "yes"}, "nodeSelector": {"zone": "z1"}}]
    wl = admit(made(run), updates=updates)
    d = run.step(queue=view(run, wl))
    assert run.replicas("StatefulSet") == {"mnist-chief": 1, "mnist-ps": 1, "mnist-worker": 2}
    sets = {c["metadata"]["name"]: c for c in d.children if c["kind"] == "StatefulSet"}
    worker = sets["mnist-worker"]["spec"]["template"]
    assert worker["spec"]["nodeSelector"] == {"gpu": "a100", "zone": "z1"}
    assert worker["spec"]["tolerations"] == [GPU_TAINT]
    assert worker["metadata"]["labels"]["prov"] == "yes"
    assert sets["mnist-ps"]["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}
    suspended = st.find(run.status, st.Cond.SUSPENDED)
    assert (suspended["status"], suspended["reason"]) == ("False", st.Reason.ADMITTED)
    assert "ClusterQueue cq" in suspended["message"]
    assert "waiting" not in run.status
    assert d.workload.create is None and d.workload.delete is None


def test_one_rendering_serves_the_spec_check_the_workload_and_the_placed_pods(monkeypatch):
    """The pod templates are rendered once, when the spec is checked: the Workload and the
    StatefulSets read them, and placing the pods on the admitted flavor leaves them as they
    were rendered (the Workload's stay unplaced, a second decision decides the same)."""
    run = Run(queued_job())
    run.step(queue=view(run))
    queue = view(run, admit(made(run)))
    job = JobView.from_body(job_record(run.body))
    assert job.built is not None
    rendered = copy.deepcopy(dict(job.built.templates))

    def render_again(*_args, **_kw):
        raise AssertionError("rendered again")

    monkeypatch.setattr(decision, "build", render_again)
    first = decide(job, [], run.now, "cluster.local", queue=queue)
    again = decide(job, [], run.now, "cluster.local", queue=queue)
    assert dict(job.built.templates) == rendered
    assert first.children == again.children
    sets = {c["metadata"]["name"]: c for c in first.children if c["kind"] == "StatefulSet"}
    assert sets["mnist-worker"]["spec"]["template"]["spec"]["nodeSelector"] == {"gpu": "a100"}
    assert "nodeSelector" not in rendered[ReplicaType.WORKER]["spec"]


def test_an_unread_flavor_or_a_pending_check_holds_the_job():
    run = Run(queued_job())
    run.step(queue=view(run))
    created = made(run)
    run.step(queue=view(run, admit(created), flavors={}))
    assert set(run.replicas("StatefulSet").values()) == {0}
    wl = admit(created)
    wl["status"]["conditions"][1] = kq.cond("Admitted", False, "UnsatisfiedAdmissionChecks")
    wl["status"]["admissionChecks"] = [{"name": "prov", "state": "Pending", "message": ""}]
    run.step(queue=view(run, wl))
    assert set(run.replicas("StatefulSet").values()) == {0}
    assert "admission checks prov" in run.status["waiting"]["mnist-chief-0"]


def test_eviction_stops_the_job_then_gives_the_reservation_back():
    run = Run(queued_job())
    run.step(queue=view(run))
    wl = admit(made(run))
    run.step(*running("mnist", SPEC), queue=view(run, wl))
    assert run.state() == st.Cond.RUNNING

    evicted = evict(wl)
    stopping = [pod("mnist", "worker", 0, state="terminated", exit_code=143)]
    stopping += running("mnist", {"Chief": 1, "PS": 1})
    d = run.step(*stopping, queue=view(run, evicted))
    assert set(run.replicas("StatefulSet").values()) == {0}
    suspended = st.find(run.status, st.Cond.SUSPENDED)
    assert (suspended["status"], suspended["reason"]) == ("True", st.Reason.EVICTED)
    assert "Preempted to fit cq-b" in suspended["message"]
    assert ("Warning", st.Reason.EVICTED) in {(t, r) for t, r, _ in run.events}
    given = d.workload.status_patch.get("status", {})
    assert "admission" not in given, "pods still active: the quota is not given back yet"
    conds = {c["type"]: c for c in given.get("conditions", [])}
    assert conds["QuotaReserved"]["status"] == "True"
    ready = conds["PodsReady"]
    assert (ready["status"], ready["reason"]) == ("False", "WaitForStart"), (
        "Kueue's, while admitted"
    )

    d = run.step(queue=view(run, evicted))
    patch = d.workload.status_patch
    assert patch["metadata"] == {"resourceVersion": "3"}
    assert patch["status"]["admission"] is None
    conds = {c["type"]: c for c in patch["status"]["conditions"]}
    assert (conds["QuotaReserved"]["status"], conds["QuotaReserved"]["reason"]) == (
        "False",
        "Pending",
    )
    assert (conds["Admitted"]["status"], conds["Admitted"]["reason"]) == ("False", "NoReservation")
    assert (conds["Requeued"]["status"], conds["Requeued"]["reason"]) == ("True", "Preempted")
    assert conds["Evicted"]["status"] == "True", "Kueue's own condition is left to Kueue"
    assert run.status["replicaStatuses"]["Worker"]["restarts"] == 0, "a preemption is no failure"
    assert run.status.get("restarts", 0) == 0


def test_an_eviction_that_is_not_a_preemption_is_not_requeued():
    run = Run(queued_job())
    run.step(queue=view(run))
    wl = evict(admit(made(run)), reason="PodsReadyTimeout")
    d = run.step(queue=view(run, wl))
    conds = {c["type"]: c for c in d.workload.status_patch["status"]["conditions"]}
    assert (conds["Requeued"]["status"], conds["Requeued"]["reason"]) == (
        "False",
        "PodsReadyTimeout",
    )


def test_readmission_on_another_flavor_moves_the_pods():
    run = Run(queued_job())
    run.step(queue=view(run))
    created = made(run)
    run.step(*running("mnist", SPEC), queue=view(run, admit(created)))
    run.step(queue=view(run, evict(admit(created))))
    d = run.step(queue=view(run, admit(created, flavor="spot", rv="5")))
    worker = next(
        c for c in d.children if c["kind"] == "StatefulSet" and "worker" in c["metadata"]["name"]
    )
    assert worker["spec"]["replicas"] == 2
    assert worker["spec"]["template"]["spec"]["nodeSelector"] == {"lifecycle": "spot"}
    assert "tolerations" not in worker["spec"]["template"]["spec"]
    assert st.find(run.status, st.Cond.SUSPENDED)["reason"] == st.Reason.ADMITTED


def test_a_spec_change_while_queued_replaces_the_workload():
    run = Run(queued_job())
    run.step(queue=view(run))
    wl = made(run)
    run.body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3
    run.body["metadata"]["generation"] = 2
    d = run.step(queue=view(run, admit(wl)))
    assert d.workload.delete == wl["metadata"]["name"]
    assert d.workload.create["spec"]["podSets"][2]["count"] == 3
    assert set(run.replicas("StatefulSet").values()) == {0}, "the old admission admits nothing"


def test_pods_ready_follows_the_pods():
    run = Run(queued_job())
    run.step(queue=view(run))
    wl = admit(made(run))
    d = run.step(*running("mnist", {"Chief": 1, "PS": 1}), queue=view(run, wl))
    ready = next(
        c for c in d.workload.status_patch["status"]["conditions"] if c["type"] == "PodsReady"
    )
    assert (ready["status"], ready["reason"]) == ("False", "WaitForStart")
    d = run.step(*running("mnist", SPEC), queue=view(run, wl))
    ready = next(
        c for c in d.workload.status_patch["status"]["conditions"] if c["type"] == "PodsReady"
    )
    assert (ready["status"], ready["reason"]) == ("True", "Started")
    wl["status"]["conditions"].append(ready)
    d = run.step(*running("mnist", SPEC), queue=view(run, wl))
    assert d.workload.status_patch == {}, "nothing changed: nothing written"
    crashed = [*running("mnist", {"Chief": 1, "PS": 1}), pod("mnist", "worker", 0, state="waiting")]
    d = run.step(*crashed, queue=view(run, wl))
    ready = next(
        c for c in d.workload.status_patch["status"]["conditions"] if c["type"] == "PodsReady"
    )
    assert (ready["status"], ready["reason"]) == ("False", "WaitForRecovery")


@pytest.mark.parametrize(("code", "reason"), [(0, "Succeeded"), (1, "Failed")])
def test_a_finished_job_marks_its_workload_finished(code, reason):
    body = queued_job()
    body["spec"]["tfReplicaSpecs"]["Chief"]["restartPolicy"] = "Never"
    run = Run(body)
    run.step(queue=view(run))
    wl = admit(made(run))
    pods = [
        *running("mnist", {"PS": 1, "Worker": 2}),
        pod("mnist", "chief", 0, state="terminated", exit_code=code),
    ]
    d = run.step(*pods, queue=view(run, wl))
    assert st.is_finished(run.status)
    finished = next(
        c for c in d.workload.status_patch["status"]["conditions"] if c["type"] == "Finished"
    )
    assert (finished["status"], finished["reason"]) == ("True", reason)
    assert (
        finished["message"]
        == st.find(run.status, st.Cond.SUCCEEDED if code == 0 else st.Cond.FAILED)["message"]
    )
    wl["status"]["conditions"].append(finished)
    d = run.step(*pods, queue=view(run, wl))
    assert d.workload.status_patch == {} and d.workload.create is None


def test_a_job_without_a_queue_is_untouched_by_kueue():
    run = Run(tfjob(name="mnist", replicas=SPEC))
    d = run.step()
    assert d.workload is None
    assert set(run.replicas("StatefulSet").values()) == {1, 2}


def test_an_admitted_job_rolls_a_new_image_and_requeues_only_for_new_resources():
    """A running job's Workload holds quota: a change admission did not decide on (an image, an
    operator that renders pods anew) rolls the pods; more resources send it back to Kueue."""
    run = Run(queued_job())
    run.step(queue=view(run))
    wl = admit(made(run))
    run.step(*running("mnist", SPEC), queue=view(run, wl))
    worker = run.body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["image"] = "trainer:2"
    run.body["metadata"]["generation"] = 2
    d = run.step(*running("mnist", SPEC), queue=view(run, wl))
    assert d.workload.delete is None and d.workload.create is None
    sets = {c["metadata"]["name"]: c for c in d.children if c["kind"] == "StatefulSet"}
    assert sets["mnist-worker"]["spec"]["replicas"] == 2
    assert sets["mnist-worker"]["spec"]["template"]["spec"]["containers"][0]["image"] == "trainer:2"

    worker["resources"] = {"requests": {"cpu": 2}}
    run.body["metadata"]["generation"] = 3
    d = run.step(*running("mnist", SPEC), queue=view(run, wl))
    assert d.workload.delete == wl["metadata"]["name"]
    assert set(run.replicas("StatefulSet").values()) == {0}
    assert st.find(run.status, st.Cond.SUSPENDED)["reason"] == st.Reason.QUEUED


# Kueue's contract for a Workload that changes: in place where Kueue's own job controllers
# update theirs (a queued job's edit, a new priority class, `active`), replaced only when what
# a quota reservation was made for changed.


def queued(wl, rv="2"):
    """`wl` waiting in its queue, with Kueue's word on why (no quota reserved)."""
    wl = json.loads(json.dumps(wl))
    wl["metadata"]["resourceVersion"] = rv
    wl["status"] = {"conditions": [kq.cond("QuotaReserved", False, "Pending", "no quota")]}
    return wl


def test_a_job_created_suspended_gets_an_inactive_workload():
    body = queued_job()
    body["spec"]["runPolicy"] = {"suspend": True}
    run = Run(body)
    d = run.step(queue=view(run))
    assert d.workload.create["spec"]["active"] is False
    assert d.workload.create["metadata"]["annotations"][kueue.DEACTIVATED_BY_SUSPEND] == "true"
    suspended = st.find(run.status, st.Cond.SUSPENDED)
    assert (suspended["status"], suspended["reason"]) == ("True", st.Reason.SUSPENDED)


def test_a_user_suspend_deactivates_the_workload_in_place_and_a_resume_activates_it():
    run = Run(queued_job())
    run.step(queue=view(run))
    wl = admit(made(run))
    run.step(*running("mnist", SPEC), queue=view(run, wl))
    run.body["spec"]["runPolicy"] = {"suspend": True}
    run.body["metadata"]["generation"] = 2
    d = run.step(*running("mnist", SPEC), queue=view(run, wl))
    assert d.workload.create is None and d.workload.delete is None
    assert d.workload.update == {
        "metadata": {
            "resourceVersion": "2",
            "annotations": {kueue.DEACTIVATED_BY_SUSPEND: "true"},
        },
        "spec": {"active": False},
    }
    assert st.find(run.status, st.Cond.SUSPENDED)["reason"] == st.Reason.SUSPENDED
    assert set(run.replicas("StatefulSet").values()) == {0}

    # Kueue evicts it (Deactivated), the pods stop, the quota goes back; then the resume.
    stopped = fake_merge(wl, d.workload.update)
    stopped = evict(stopped, reason="Deactivated")
    d = run.step(queue=view(run, stopped))
    given = fake_merge(stopped, d.workload.status_patch)
    given["metadata"]["resourceVersion"] = "4"
    run.body["spec"]["runPolicy"] = {}
    run.body["metadata"]["generation"] = 3
    d = run.step(queue=view(run, given))
    assert d.workload.update == {
        "metadata": {"resourceVersion": "4", "annotations": {kueue.DEACTIVATED_BY_SUSPEND: None}},
        "spec": {"active": True},
    }
    assert d.workload.create is None and d.workload.delete is None


def fake_merge(wl, patch):
    """A merge patch applied as the API server does (RFC 7386)."""

    def merge(target, p):
        if not isinstance(p, dict):
            return copy.deepcopy(p)
        out = dict(target) if isinstance(target, dict) else {}
        for k, v in p.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = merge(out.get(k), v)
        return out

    return merge(wl, patch)


@pytest.mark.parametrize(
    ("suspend", "active", "marked", "spec", "mark"),
    [
        (True, True, False, {"active": False}, "true"),
        (True, False, True, None, None),
        (True, False, False, None, None),  # Kueue or an admin deactivated it: not ours
        (False, False, True, {"active": True}, "drop"),
        (False, False, False, None, None),  # nor ours to undo (requeuing limit, kueuectl stop)
        (False, True, True, None, "drop"),
        (False, True, False, None, None),
    ],
)
def test_active_follows_the_users_suspend_only(suspend, active, marked, spec, mark):
    from tfjob_operator.rules.kueue.workload import workload_update

    ref = JobRef("mnist", "default", "uid-1")
    wanted = workload(ref, "v1beta2", "team-a", [], None, not suspend)
    stored = json.loads(json.dumps(wanted))
    stored["spec"]["active"] = active
    stored["metadata"]["resourceVersion"] = "7"
    notes = stored["metadata"]["annotations"]
    notes.pop(kueue.DEACTIVATED_BY_SUSPEND, None)
    if marked:
        notes[kueue.DEACTIVATED_BY_SUSPEND] = "true"
    patch = workload_update(observe_workload(stored), wanted, suspend)
    assert patch.get("spec") == spec
    annotations = patch.get("metadata", {}).get("annotations", {})
    assert (
        annotations.get(kueue.DEACTIVATED_BY_SUSPEND, "absent")
        == {
            None: "absent",
            "true": "true",
            "drop": None,
        }[mark]
    )


def wpc(name, value):
    return Priority(kueue.GROUP, name, value)


def test_a_priority_value_kueue_changes_restarts_nothing():
    """Kueue rewrites spec.priority in place when a WorkloadPriorityClass' value changes; the
    operator reads the new value a little later. Neither replaces the Workload."""
    run = Run(queued_job(**{kueue.PRIORITY_LABEL: "low"}))
    run.step(queue=QueueView("team-a", "v1beta2", None, FLAVORS, wpc("low", 100)))
    wl = admit(made(run))
    run.step(
        *running("mnist", SPEC),
        queue=QueueView("team-a", "v1beta2", observe_workload(wl), FLAVORS, wpc("low", 100)),
    )
    wl["spec"]["priority"] = 500  # Kueue's WorkloadPriorityClass controller
    for value in (100, 500):
        q = QueueView("team-a", "v1beta2", observe_workload(wl), FLAVORS, wpc("low", value))
        d = run.step(*running("mnist", SPEC), queue=q)
        assert d.workload.create is None and d.workload.delete is None
        assert d.workload.update == {}, "a class' value is Kueue's to write"
        assert set(run.replicas("StatefulSet").values()) == {1, 2}


PC = Priority(kueue.POD_PRIORITY_GROUP, "high", 1000)


@pytest.mark.parametrize(
    ("reserved", "have", "want", "expected"),
    [
        # Kueue's UpdateWorkloadPriority: a Workload that follows the label takes its new class.
        (True, wpc("low", 100), wpc("urgent", 900), "want"),
        (False, wpc("low", 100), wpc("urgent", 900), "want"),
        (False, None, wpc("urgent", 900), "want"),
        (False, wpc("low", 100), PC, "want"),  # the label gone: the pods' class
        (False, wpc("low", 100), None, "want"),
        # ... not a new value of the same class (Kueue's to write) ...
        (True, wpc("low", 100), wpc("low", 500), None),
        (False, wpc("low", 100), wpc("low", 500), None),
        # ... nor a Workload that a PriorityClass sets, ...
        (False, PC, wpc("urgent", 900), None),
        (True, PC, Priority(kueue.POD_PRIORITY_GROUP, "low", 1), None),
        # ... nor what the API refuses while quota is reserved (a class added, a group changed).
        (True, None, wpc("urgent", 900), None),
        (True, wpc("low", 100), PC, None),
    ],
)
@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
def test_a_priority_class_changes_in_place_as_kueue_changes_it(
    reserved, have, want, expected, version
):
    from tfjob_operator.rules.kueue.workload import priority_update

    ref = JobRef("mnist", "default", "uid-1")
    stored = workload(ref, version, "team-a", [], have)
    if reserved:
        stored = admit(stored)
    wanted = workload(ref, version, "team-a", [], want)
    patch = priority_update(observe_workload(stored), wanted)
    if expected is None:
        assert patch == {}
        return
    after = fake_merge(stored, {"spec": patch})
    fields = [k for k in kueue.PRIORITY_FIELDS if k in after["spec"] or k in wanted["spec"]]
    assert {k: after["spec"].get(k) for k in fields} == {k: wanted["spec"].get(k) for k in fields}


def _old_hashes(spec):
    """The hashes an operator that still counted the priority wrote (before this change)."""
    import hashlib

    def digest(obj):
        return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]

    what = {
        "priority": [spec.get(k) for k in ("priority", "priorityClassRef", "priorityClassName")],
        "queue": spec.get("queueName"),
        "podSets": [
            {
                "name": p["name"],
                "count": p["count"],
                "resources": [
                    (c.get("name"), c.get("resources"))
                    for kind in ("initContainers", "containers")
                    for c in p["template"]["spec"].get(kind) or []
                ],
                **{
                    k: p["template"]["spec"].get(k)
                    for k in (
                        "nodeSelector",
                        "tolerations",
                        "affinity",
                        "priorityClassName",
                        "runtimeClassName",
                        "overhead",
                    )
                },
            }
            for p in spec.get("podSets") or []
        ],
    }
    return digest(spec), digest(what)


@pytest.mark.parametrize("admitted", [True, False])
def test_a_workload_an_older_operator_made_is_kept_after_an_upgrade(admitted):
    run = Run(queued_job(**{kueue.PRIORITY_LABEL: "low"}))
    run.step(queue=QueueView("team-a", "v1beta2", None, FLAVORS, wpc("low", 100)))
    wl = made(run)
    podsets, admission = _old_hashes(wl["spec"])
    wl["metadata"]["annotations"] = {kueue.PODSETS_HASH: podsets, kueue.ADMISSION_HASH: admission}
    wl = admit(wl) if admitted else queued(wl)
    q = QueueView("team-a", "v1beta2", observe_workload(wl), FLAVORS, wpc("low", 100))
    d = run.step(*running("mnist", SPEC), queue=q)
    assert d.workload.create is None and d.workload.delete is None
    assert d.workload.update == {}


def test_an_edit_of_a_queued_job_updates_its_workload_in_place():
    run = Run(queued_job(**{kueue.PRIORITY_LABEL: "low"}))
    run.step(queue=QueueView("team-a", "v1beta2", None, FLAVORS, wpc("low", 100)))
    wl = queued(made(run))
    wl["spec"]["priority"] = 500  # Kueue's since
    run.body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3
    run.body["metadata"]["labels"][kueue.QUEUE_LABEL] = "team-b"
    run.body["metadata"]["generation"] = 2
    q = QueueView("team-b", "v1beta2", observe_workload(wl), FLAVORS, wpc("low", 100))
    d = run.step(queue=q)
    assert d.workload.create is None and d.workload.delete is None, "its place in the queue kept"
    patch = d.workload.update
    assert patch["metadata"]["resourceVersion"] == "2"
    assert patch["spec"]["queueName"] == "team-b"
    assert [p["count"] for p in patch["spec"]["podSets"]] == [1, 1, 3]
    assert patch["spec"]["priority"] == 500, "the class' value as Kueue keeps it"
    assert "active" not in patch["spec"]
    updated = fake_merge(wl, patch)
    d = run.step(
        queue=QueueView("team-b", "v1beta2", observe_workload(updated), FLAVORS, wpc("low", 100))
    )
    assert d.workload.update == {} and d.workload.create is None, "up to date now"


NOT_READY = "Not all pods are ready or succeeded"


@pytest.mark.parametrize(
    ("conditions", "pods_ready", "active_pods", "expected"),
    [
        # queued: Kueue's jobframework writes WaitForStart while not admitted
        ([], False, 0, ("False", "WaitForStart")),
        # admitted: follows the pods
        ([("Admitted", True, "R")], False, 0, ("False", "WaitForStart")),
        ([("Admitted", True, "R")], True, 4, ("True", "Started")),
        (
            [("Admitted", True, "R"), ("PodsReady", True, "Started")],
            False,
            3,
            ("False", "WaitForRecovery"),
        ),
        (
            [("Admitted", True, "R"), ("PodsReady", False, "WaitForRecovery")],
            True,
            4,
            ("True", "Recovered"),
        ),
        # evicted, pods still stopping: still Admitted, so it follows them
        (
            [
                ("Admitted", True, "R"),
                ("PodsReady", True, "Started"),
                ("Evicted", True, "Preempted"),
            ],
            False,
            2,
            ("False", "WaitForRecovery"),
        ),
        # evicted, pods gone: the reservation given back, and PodsReady with it
        (
            [
                ("Admitted", True, "R"),
                ("PodsReady", True, "Started"),
                ("Evicted", True, "Preempted"),
            ],
            False,
            0,
            ("False", "WaitForStart"),
        ),
        # readmitted after that: waits for its start, not its recovery
        (
            [("Admitted", True, "R"), ("PodsReady", False, "WaitForStart", NOT_READY)],
            False,
            2,
            None,
        ),
    ],
)
def test_pods_ready_is_kueues_after_an_eviction(conditions, pods_ready, active_pods, expected):
    from datetime import UTC, datetime

    from tfjob_operator.rules.kueue.workload_status import workload_status

    conds = [kq.cond(*c) for c in conditions]
    admitted = any(c[0] == "Admitted" for c in conditions)
    if admitted:
        conds.append(kq.cond("QuotaReserved", True, "R"))
    body = {"metadata": {"name": "wl", "resourceVersion": "9"}, "status": {"conditions": conds}}
    if admitted:
        body["status"]["admission"] = {"clusterQueue": "cq", "podSetAssignments": []}
    patch = workload_status(
        observe_workload(body),
        active_pods=active_pods,
        pods_ready=pods_ready,
        finished=None,
        now=datetime(2026, 1, 1, tzinfo=UTC),
    )
    if expected is None:
        assert patch == {}, "WaitForStart already"
        return
    ready = next(c for c in patch["status"]["conditions"] if c["type"] == "PodsReady")
    assert (ready["status"], ready["reason"]) == expected
