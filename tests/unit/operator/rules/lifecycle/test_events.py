"""Every Event the operator posts, against the condition and the `status.lastStop` cause it goes
with: one row a case, each driving the pure rules as the operator does, and each reason in at
least one row. The reasons are collected from the code (`st.Reason`, and every place that makes
an Event), so a new reason, or a new place that posts one, fails here until it has a row.

The rows check that the Event, its type and the status say the same thing; the user's suspend
under Kueue is the case that once did not (a Warning `Evicted` claiming that the job resumed
when Kueue admitted it again, where it resumes when its user says so)."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import tfjob_operator
from tests.unit.operator.rules.kueue import played as kq
from tests.unit.operator.rules.kueue.test_workload import (
    admit,
    evict,
    fake_merge,
    made,
    queued_job,
    view,
)
from tests.unit.operator.rules.lifecycle.decide_run import T0, Run, running
from tests.unit.operator.rules.lifecycle.test_restart import OLD, RESIZED_PODS, SETS, on, sts
from tests.unit.operator.rules.lifecycle.test_restart import step as restart_step
from tests.unit.operator.rules.lifecycle.test_stops import deleting, stopped
from tests.unit.operator.rules.test_nodelost import started, with_lost_worker
from tfjob_operator.rules import handover, nodelost
from tfjob_operator.rules import status as st
from tfjob_operator.rules.kueue import DEACTIVATED_BY_SUSPEND, multikueue
from tfjob_operator.rules.kueue.admission import observe_workload
from tfjob_operator.rules.lifecycle import restart, stops, together
from tfjob_operator.rules.pods import observe
from tfjob_testbed.core.jobs import pod, tfjob

R = st.Reason
SPEC = {"Chief": 1, "PS": 1, "Worker": 2}
NAME = "default/mnist"

# What the operator posts, place by place: (file, the reason as the code writes it) -> the
# reasons it may be. `finish` announces conditions; the rest are Events of no condition.
EVENT_ONLY = {
    R.POD_WAITING,
    R.SPEC_ADJUSTED,
    R.SPEC_IGNORED,
    R.MANAGED_ELSEWHERE,
    R.DISPATCHED,
    R.NOT_DISPATCHED,
    R.KUEUE_TOOK_OVER_CHILD,
}
CONDITION_REASONS = {v for k, v in vars(R).items() if k.isupper()} - EVENT_ONLY
SITES: dict[tuple[str, str], set[str]] = {
    # `finish`: a condition's reason (as `ast.unparse` writes it)
    ("rules/lifecycle/decision.py", "c.get('reason', c['type'])"): CONDITION_REASONS,
    ("rules/lifecycle/decision.py", "st.Reason.SPEC_IGNORED"): {R.SPEC_IGNORED},
    ("rules/lifecycle/decision.py", "st.Reason.SPEC_ADJUSTED"): {R.SPEC_ADJUSTED},
    # A restart's Event is named after its cause, `status.lastStop`'s.
    ("rules/lifecycle/decision.py", "again.cause"): {stops.RESIZED, restart.UPDATED},
    ("rules/lifecycle/stops.py", "REASON"): {stops.REASON},
    # The pods stopped with a parameter server that goes: its stop, the cluster's.
    ("rules/lifecycle/decision.py", "WITH_PS"): {together.REASON},
    ("rules/lifecycle/waiting.py", "nodelost.REASON"): {nodelost.REASON},
    ("rules/lifecycle/waiting.py", "st.Reason.POD_WAITING"): {R.POD_WAITING},
    ("rules/handover.py", "st.Reason.MANAGED_ELSEWHERE"): {R.MANAGED_ELSEWHERE},
    ("rules/handover.py", "st.Reason.KUEUE_TOOK_OVER_CHILD"): {R.KUEUE_TOOK_OVER_CHILD},
    ("rules/kueue/multikueue.py", "st.Reason.DISPATCHED"): {R.DISPATCHED},
    ("rules/kueue/multikueue.py", "st.Reason.NOT_DISPATCHED"): {R.NOT_DISPATCHED},
}
POSTED = set().union(*SITES.values())
# The one place that hands Events to the API server (kopf.event).
SINK = "controller/apply.py"


@dataclass
class Outcome:
    """The Events of the case's act (after its setup), and the job's status after it."""

    events: list[tuple[str, str, str]]
    status: st.Status


def act(run: Run, *steps: Callable[[], Any]) -> Outcome:
    """Run `steps` (each one `run.step`) and keep the Events they post."""
    start = len(run.events)
    for s in steps:
        s()
    return Outcome(run.events[start:], run.status)


def kueue_evicts(wl: dict[str, Any], reason: str, message: str) -> dict[str, Any]:
    """`wl` with the Evicted condition Kueue writes (kept True until it admits it again)."""
    wl = json.loads(json.dumps(wl))
    wl["metadata"]["resourceVersion"] = str(int(wl["metadata"].get("resourceVersion") or 1) + 1)
    status = wl.setdefault("status", {})
    status["conditions"] = [c for c in status.get("conditions", []) if c["type"] != "Evicted"]
    status["conditions"].append(kq.cond("Evicted", True, reason, message))
    return wl


DEACTIVATED = "The workload is deactivated"  # Kueue's message, with reason Deactivated


def saving(step: int, at: datetime) -> list[dict[str, Any]]:
    """The job's pods being deleted since `at`, the chief's container saved at `step`."""
    pods = [deleting(p, at) for p in running("mnist", SPEC)]
    pods[0] = deleting(stopped("chief", 0, step), at)
    return pods


# --- the cases: each returns the Events of its act and the status after it


def created() -> Outcome:
    run = Run(tfjob(replicas=SPEC))
    return act(run, run.step)


def runs() -> Outcome:
    run = Run(tfjob(replicas=SPEC))
    run.step()
    return act(run, lambda: run.step(*running("mnist", SPEC)))


def crashes() -> Outcome:
    run = Run(tfjob(replicas={"Worker": 1}, restart_policy="OnFailure"))
    run.step(pod("mnist", "worker", 0))
    return act(run, lambda: run.step(pod("mnist", "worker", 0, state="terminated", exit_code=1)))


def succeeds() -> Outcome:
    run = Run(tfjob(replicas=SPEC))
    run.step(*running("mnist", SPEC))
    pods = running("mnist", SPEC)
    pods[0] = pod("mnist", "chief", 0, state="terminated", exit_code=0)
    return act(run, lambda: run.step(*pods))


def fails() -> Outcome:
    run = Run(tfjob(replicas=SPEC))
    run.step(*running("mnist", SPEC))
    pods = running("mnist", SPEC)
    pods[-1] = pod("mnist", "worker", 1, state="terminated", exit_code=1)
    return act(run, lambda: run.step(*pods))


def exceeds_backoff() -> Outcome:
    body = tfjob(replicas={"Worker": 1}, restart_policy="OnFailure", run_policy={"backoffLimit": 0})
    run = Run(body)
    run.step(pod("mnist", "worker", 0))
    return act(run, lambda: run.step(pod("mnist", "worker", 0, last_exit=1, restarts=1)))


def exceeds_deadline() -> Outcome:
    run = Run(tfjob(replicas={"Worker": 1}, run_policy={"activeDeadlineSeconds": 60}))
    run.step(pod("mnist", "worker", 0))
    return act(run, lambda: run.step(pod("mnist", "worker", 0), after=61))


def invalid() -> Outcome:
    run = Run(tfjob(replicas={"PS": 1}))
    return act(run, run.step)


def edited_invalid() -> Outcome:
    """A running job edited into an invalid spec: it runs on, and says why."""
    body = tfjob(replicas={"Worker": 1})
    run = Run(body)
    run.step(pod("mnist", "worker", 0))
    body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two"
    return act(run, lambda: run.step(pod("mnist", "worker", 0)))


def edited_valid_again() -> Outcome:
    body = tfjob(replicas={"Worker": 1})
    run = Run(body)
    run.step(pod("mnist", "worker", 0))
    body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two"
    run.step(pod("mnist", "worker", 0))
    body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1
    return act(run, lambda: run.step(pod("mnist", "worker", 0)))


def suspended() -> Outcome:
    """The user suspends a running job (no Kueue): its pods save and stop."""
    body = tfjob(replicas=SPEC)
    run = Run(body)
    run.step(*running("mnist", SPEC))

    def suspend():
        body["spec"]["runPolicy"] = {"suspend": True}
        run.step(*running("mnist", SPEC))

    return act(run, suspend, lambda: run.step(*saving(55, run.now)), run.step)


def resumed() -> Outcome:
    body = tfjob(replicas=SPEC)
    run = Run(body)
    run.step(*running("mnist", SPEC))
    body["spec"]["runPolicy"] = {"suspend": True}
    run.step(*running("mnist", SPEC))
    run.step()
    body["spec"]["runPolicy"] = {"suspend": False}
    return act(run, run.step)


def _kueue_running() -> tuple[Run, dict[str, Any]]:
    run = Run(queued_job())
    run.step(queue=view(run))
    wl = admit(made(run))
    run.step(*running("mnist", SPEC), queue=view(run, wl))
    assert run.state() == st.Cond.RUNNING
    return run, wl


def _kueue_suspended() -> tuple[Run, dict[str, Any], Outcome]:
    """The user suspends a job Kueue admitted and that runs. The operator deactivates its
    Workload; Kueue evicts the Workload for it (reason Deactivated); the pods save and stop;
    the operator gives the quota back, as Kueue's own job controllers do."""
    run, wl = _kueue_running()
    body = run.body
    state: dict[str, Any] = {}

    def suspend():
        body["spec"]["runPolicy"] = {"suspend": True}
        body["metadata"]["generation"] = 2
        d = run.step(*running("mnist", SPEC), queue=view(run, wl))
        state["wl"] = kueue_evicts(fake_merge(wl, d.workload.update), "Deactivated", DEACTIVATED)

    def pods_stop():
        run.step(*saving(55, run.now), queue=view(run, state["wl"]))

    def quota_given_back():
        d = run.step(queue=view(run, state["wl"]))
        state["wl"] = fake_merge(state["wl"], d.workload.status_patch)

    outcome = act(run, suspend, pods_stop, quota_given_back)
    assert observe_workload(state["wl"]).deactivated_by_suspend
    return run, state["wl"], outcome


def kueue_suspended() -> Outcome:
    return _kueue_suspended()[2]


def kueue_resumed() -> Outcome:
    """The user resumes it: the operator activates the Workload again (Kueue's Evicted stays
    True until it admits it again), the job is queued, then admitted."""
    run, wl, _ = _kueue_suspended()
    body = run.body
    state = {"wl": wl}

    def resume():
        body["spec"]["runPolicy"] = {}
        body["metadata"]["generation"] = 3
        d = run.step(queue=view(run, state["wl"]))
        state["wl"] = fake_merge(state["wl"], d.workload.update)

    def readmitted():
        run.step(queue=view(run, state["wl"]))
        run.step(queue=view(run, admit(state["wl"], rv="9")))

    return act(run, resume, readmitted)


def kueue_created_suspended_then_resumed() -> Outcome:
    """Created suspended: its Workload is inactive from the start, and Kueue evicts it all
    the same (Deactivated) though it never admitted it."""
    body = queued_job()
    body["spec"]["runPolicy"] = {"suspend": True}
    run = Run(body)
    state: dict[str, Any] = {}

    def create():
        run.step(queue=view(run))
        state["wl"] = kueue_evicts(made(run), "Deactivated", DEACTIVATED)
        run.step(queue=view(run, state["wl"]))

    def resume():
        body["spec"]["runPolicy"] = {}
        run.step(queue=view(run, state["wl"]))

    return act(run, create, resume)


def queued() -> Outcome:
    run = Run(queued_job())
    return act(run, lambda: run.step(queue=view(run)))


def admitted() -> Outcome:
    run = Run(queued_job())
    run.step(queue=view(run))
    return act(run, lambda: run.step(queue=view(run, admit(made(run)))))


def kueue_preempts() -> Outcome:
    """Kueue's own eviction of a running job (a preemption): the pods save and stop."""
    run, wl = _kueue_running()
    evicted = evict(wl)
    return act(
        run,
        lambda: run.step(*running("mnist", SPEC), queue=view(run, evicted)),
        lambda: run.step(*saving(80, run.now), queue=view(run, evicted)),
    )


def admin_deactivates() -> Outcome:
    """An admin deactivates the Workload (`kueuectl stop workload`): Kueue's eviction, held
    until someone activates it again."""
    run, wl = _kueue_running()
    wl = json.loads(json.dumps(wl))
    wl["spec"]["active"] = False
    evicted = kueue_evicts(wl, "Deactivated", DEACTIVATED)
    return act(run, lambda: run.step(*running("mnist", SPEC), queue=view(run, evicted)))


def reconcile_fails() -> Outcome:
    run = Run(tfjob(replicas={"Worker": 1}))
    run.step()
    return act(run, lambda: run.step(error="403 Forbidden: statefulsets.apps is forbidden"))


def reconcile_heals() -> Outcome:
    run = Run(tfjob(replicas={"Worker": 1}))
    run.step()
    run.step(error="403 Forbidden: statefulsets.apps is forbidden")
    return act(run, run.step)


CREATED = {"type": "Created", "status": "True", "reason": R.CREATED, "message": "m"}


def started_elsewhere() -> Outcome:
    d = handover.started_elsewhere({"conditions": [CREATED]}, ["Pod/mnist-worker-0"], NAME, T0)
    assert d is not None
    return Outcome(d.events, d.status)


def handed_over() -> Outcome:
    d = handover.started_elsewhere({"conditions": [CREATED]}, ["Pod/mnist-worker-0"], NAME, T0)
    assert d is not None
    run = Run(tfjob(replicas={"Worker": 1}, status=d.status))
    return act(run, run.step)


def managed_elsewhere() -> Outcome:
    return Outcome([handover.managed_elsewhere_event(NAME, "kueue.x-k8s.io/multikueue")], {})


def dispatched() -> Outcome:
    return Outcome([multikueue.dispatched_event(NAME)], {})


def not_dispatched() -> Outcome:
    return Outcome([multikueue.no_queue_event(NAME)], {})


def kueue_took_a_pod() -> Outcome:
    gated = pod("mnist", "worker", 0)
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    event = handover.kueue_took_over(NAME, "tfjob.dev", [], [observe(gated)])
    assert event is not None
    return Outcome([event], {})


def pod_waits() -> Outcome:
    run = Run(tfjob(replicas={"PS": 1, "Worker": 1}))
    bad = pod("mnist", "worker", 0, state="waiting", reason="ErrImagePull", message="not found")
    return act(run, lambda: run.step(pod("mnist", "ps", 0), bad))


def node_lost() -> Outcome:
    run = started()
    return act(run, lambda: run.step(*with_lost_worker(), after=5))


def spec_adjusted() -> Outcome:
    body = tfjob(replicas={"Worker": 1})
    body["metadata"]["generation"] = 1
    c = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    c["env"] = [{"name": "TF_CONFIG", "value": "{}"}]
    run = Run(body)
    return act(run, run.step)


def spec_ignored() -> Outcome:
    body = tfjob(replicas={"Worker": 1})
    body["metadata"]["generation"] = 1
    run = Run(body)
    run.step(pod("mnist", "worker", 0, state="terminated", exit_code=0))

    def edit():
        body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
        body["metadata"]["generation"] = 2
        run.step()

    return act(run, edit)


def _drained(reason: str | None) -> Outcome:
    run = Run(tfjob(replicas=SPEC))
    run.step(*running("mnist", SPEC))
    began = run.now
    pods = running("mnist", SPEC)
    pods[0] = deleting(pod("mnist", "chief", 0), began, reason)
    saved = [deleting(stopped("chief", 0, 1200), began, reason), *pods[1:]]
    return act(run, lambda: run.step(*pods), lambda: run.step(*saved))


def disrupted() -> Outcome:
    return _drained("EvictionByEvictionAPI")


def pod_deleted() -> Outcome:
    return _drained(None)


def parameter_server_drained() -> Outcome:
    """A parameter server drained alone: the job stops with it."""
    run = Run(tfjob(replicas=SPEC))
    run.step(*running("mnist", SPEC))
    pods = running("mnist", SPEC)
    pods[1] = deleting(pod("mnist", "ps", 0), run.now, "EvictionByEvictionAPI")
    return act(run, lambda: run.step(*pods))


def container_stopped() -> Outcome:
    run = Run(tfjob(replicas=SPEC))
    run.step(*running("mnist", SPEC))
    pods = running("mnist", SPEC)
    pods[0] = stopped("chief", 0, 7)
    return act(run, lambda: run.step(*pods))


def resized() -> Outcome:
    """Worker 2 -> 3: every task restarts with the new cluster."""
    body = tfjob(name="j", replicas={"PS": 1, "Worker": 2})
    pods = [observe(on("ps", 0, OLD)), *(observe(on("worker", i, OLD)) for i in range(2))]
    restart_step(body, pods, [sts("ps", OLD, 1, 1), sts("worker", OLD, 1, 1, replicas=2)], T0)
    body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3
    later = T0 + timedelta(seconds=10)
    d = restart_step(body, [observe(p) for p in RESIZED_PODS], SETS, later)
    return Outcome(d.events, body["status"])


def updated() -> Outcome:
    """A new image: the same counts, every pod of the new template restarts."""
    body = tfjob(name="j", replicas={"Worker": 2})
    pods = [observe(on("worker", i, OLD)) for i in range(2)]
    restart_step(body, pods, [sts("worker", OLD, 1, 1, replicas=2)], T0)
    later = T0 + timedelta(seconds=10)
    d = restart_step(body, pods, [sts("worker", replicas=2)], later)
    return Outcome(d.events, body["status"])


N, W = "Normal", "Warning"
SUSPENDED_BY_USER = (st.Cond.SUSPENDED, "True", R.SUSPENDED)
RUNNING = (st.Cond.RUNNING, "True", R.RUNNING)


def row(
    case: Callable[[], Outcome],
    events: list[tuple[str, str]],
    condition: tuple[str, str, str] | None,
    cause: str | None,
    says: str = "",
    never: str = "",
) -> Any:
    """A case; the Events of its act (type, reason); the condition that goes with them (the
    one announced last, else the one that stands; None: the job's status is not touched);
    lastStop's cause; words an Event must say, and words no Event may say."""
    return pytest.param(case, events, condition, cause, says, never, id=case.__name__)


CASES = [
    row(created, [(N, R.CREATED)], ("Created", "True", R.CREATED), None),
    row(runs, [(N, R.RUNNING)], RUNNING, None),
    row(
        crashes,
        [(W, R.RESTARTING)],
        (st.Cond.RESTARTING, "True", R.RESTARTING),
        None,  # a crash is no stop
    ),
    row(succeeds, [(N, R.SUCCEEDED)], ("Succeeded", "True", R.SUCCEEDED), None),
    row(fails, [(W, R.FAILED)], ("Failed", "True", R.FAILED), None),
    row(
        exceeds_backoff,
        [(W, R.BACKOFF_LIMIT_EXCEEDED)],
        ("Failed", "True", R.BACKOFF_LIMIT_EXCEEDED),
        None,
    ),
    row(
        exceeds_deadline,
        [(W, R.DEADLINE_EXCEEDED)],
        ("Failed", "True", R.DEADLINE_EXCEEDED),
        None,
    ),
    row(
        invalid,
        [(N, R.CREATED), (W, R.INVALID_SPEC)],
        ("Failed", "True", R.INVALID_SPEC),
        None,
    ),
    row(
        edited_invalid,
        [(W, R.INVALID_EDIT)],
        (st.Cond.SPEC_REJECTED, "True", R.INVALID_EDIT),
        None,
        says="runs on as before the edit",
    ),
    row(
        edited_valid_again,
        [(N, R.SPEC_ACCEPTED)],
        (st.Cond.SPEC_REJECTED, "False", R.SPEC_ACCEPTED),
        None,
    ),
    row(
        suspended,
        [(N, R.SUSPENDED), (N, stops.REASON)],
        SUSPENDED_BY_USER,
        stops.SUSPENDED,
    ),
    row(
        kueue_suspended,
        [(N, R.SUSPENDED), (N, stops.REASON)],
        SUSPENDED_BY_USER,
        stops.SUSPENDED,
        "TFJob default/mnist is suspended.",
        "Kueue",  # Kueue's eviction of the Workload deactivated for it holds nothing
    ),
    row(
        resumed,
        [(N, R.RESUMED)],
        (st.Cond.SUSPENDED, "False", R.RESUMED),
        stops.SUSPENDED,  # kept until the next stop
    ),
    row(
        kueue_resumed,
        [(N, R.QUEUED), (N, R.ADMITTED)],
        (st.Cond.SUSPENDED, "False", R.ADMITTED),
        stops.SUSPENDED,
        "now that the job is resumed",
        "deactivated",
    ),
    row(
        kueue_created_suspended_then_resumed,
        [(N, R.CREATED), (N, R.SUSPENDED), (N, R.QUEUED)],
        (st.Cond.SUSPENDED, "True", R.QUEUED),
        None,  # it never ran: nothing stopped
    ),
    row(
        queued,
        [(N, R.CREATED), (N, R.QUEUED)],
        (st.Cond.SUSPENDED, "True", R.QUEUED),
        None,
    ),
    row(
        admitted,
        [(N, R.ADMITTED)],
        (st.Cond.SUSPENDED, "False", R.ADMITTED),
        None,
    ),
    row(
        kueue_preempts,
        [(W, R.EVICTED), (N, stops.REASON)],
        (st.Cond.SUSPENDED, "True", R.EVICTED),
        stops.EVICTED,
        "Preempted to fit cq-b",
    ),
    row(
        admin_deactivates,
        [(W, R.EVICTED)],
        (st.Cond.SUSPENDED, "True", R.EVICTED),
        stops.EVICTED,
        "resumes once Workload",
        "admits Workload",
    ),
    row(
        reconcile_fails,
        [(W, R.RECONCILE_ERROR)],
        (st.Cond.RECONCILE_ERROR, "True", R.RECONCILE_ERROR),
        None,
    ),
    row(
        reconcile_heals,
        [(N, R.RECONCILED)],
        (st.Cond.RECONCILE_ERROR, "False", R.RECONCILED),
        None,
    ),
    row(
        started_elsewhere,
        [(W, R.FOREIGN_CHILDREN)],
        (st.Cond.STARTED_ELSEWHERE, "True", R.FOREIGN_CHILDREN),
        None,
    ),
    row(
        handed_over,
        [(N, R.HANDED_OVER)],
        (st.Cond.STARTED_ELSEWHERE, "False", R.HANDED_OVER),
        None,
    ),
    row(managed_elsewhere, [(N, R.MANAGED_ELSEWHERE)], None, None),
    row(kueue_took_a_pod, [(W, R.KUEUE_TOOK_OVER_CHILD)], None, None),
    row(dispatched, [(N, R.DISPATCHED)], None, None, says="worker cluster"),
    row(not_dispatched, [(W, R.NOT_DISPATCHED)], None, None, says="LocalQueue"),
    row(
        pod_waits,
        [(N, R.CREATED), (W, R.POD_WAITING)],
        ("Created", "True", R.CREATED),
        None,
    ),
    row(node_lost, [(W, nodelost.REASON)], RUNNING, None),
    row(
        spec_adjusted,
        [(W, R.SPEC_ADJUSTED), (N, R.CREATED)],
        ("Created", "True", R.CREATED),
        None,
    ),
    row(
        spec_ignored,
        [(W, R.SPEC_IGNORED)],
        ("Succeeded", "True", R.SUCCEEDED),
        None,
    ),
    row(disrupted, [(N, stops.REASON)], RUNNING, stops.DISRUPTED),
    row(pod_deleted, [(N, stops.REASON)], RUNNING, stops.POD_DELETED),
    row(
        parameter_server_drained,
        [(N, together.REASON)],
        RUNNING,
        stops.DISRUPTED,
        says="the chief saves while that server still serves",
    ),
    row(
        container_stopped,
        [(N, stops.REASON)],
        RUNNING,
        stops.CONTAINER_STOPPED,
    ),
    row(resized, [(N, stops.RESIZED)], RUNNING, stops.RESIZED),
    row(updated, [(N, restart.UPDATED)], RUNNING, restart.UPDATED),
]


@pytest.mark.parametrize(("case", "events", "condition", "cause", "says", "never"), CASES)
def test_each_event_goes_with_its_condition_and_stop(case, events, condition, cause, says, never):
    out = case()
    assert [(t, r) for t, r, _ in out.events] == events
    messages = [m for _, _, m in out.events]
    assert all(reason in POSTED for _, reason in events)
    if says:
        assert any(says in m for m in messages), messages
    if never:
        assert not any(never in m for m in messages), messages
    # An Event of a condition is Warning for bad news only, and says what the condition says.
    told = [(t, r, m) for t, r, m in out.events if r in CONDITION_REASONS]
    for t, r, _ in told:
        assert t == ("Warning" if r in st.WARNING_REASONS else "Normal"), r
    if condition is None:
        assert not told
    else:
        cond = st.find(out.status, condition[0])
        assert cond is not None and (cond["type"], cond["status"], cond["reason"]) == condition
        if told:
            assert told[-1][1:] == (cond["reason"], cond["message"]), "the last Event is the state"
    # lastStop: the cause of the stop, and what the Events about it say.
    last = out.status.get("lastStop")
    assert (last or {}).get("cause") == cause
    if condition is not None and condition[2] in (R.SUSPENDED, R.EVICTED) and cause is not None:
        assert cause == (stops.SUSPENDED if condition[2] == R.SUSPENDED else stops.EVICTED)
    for _, r, m in out.events:
        if r == stops.REASON:
            assert f"stopped at step {last['savedStep']} ({cause})" in m
        if r in (stops.RESIZED, restart.UPDATED):
            assert r == cause and last["message"] in m


def test_every_reason_the_operator_posts_has_a_row():
    """A new reason (in `st.Reason`, or at a new place that posts Events) needs a row above."""
    assert {v for k, v in vars(R).items() if k.isupper()} <= POSTED
    rows = {reason for p in CASES for _, reason in p.values[1]}
    assert rows == POSTED


def _sites() -> tuple[set[tuple[str, str]], set[str]]:
    """(file, reason as written) of every Event the code makes (a tuple that starts with
    "Normal" or "Warning"), and the files that call kopf's event functions."""
    root = Path(tfjob_operator.__file__).parent
    sites, sinks = set(), set()
    for path in sorted(root.rglob("*.py")):
        where = path.relative_to(root).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Tuple) and len(node.elts) == 3 and _event_type(node.elts[0]):
                sites.add((where, ast.unparse(node.elts[1])))
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "kopf"
                and node.func.attr in ("event", "info", "warn", "exception")
            ):
                sinks.add(where)
    return sites, sinks


def _event_type(node: ast.expr) -> bool:
    if isinstance(node, ast.IfExp):
        return _event_type(node.body) and _event_type(node.orelse)
    return isinstance(node, ast.Constant) and node.value in ("Normal", "Warning")


def test_every_place_that_makes_an_event_is_known():
    sites, sinks = _sites()
    assert sites == set(SITES)
    assert sinks == {SINK}


@pytest.mark.parametrize(
    ("active", "ours", "reason", "kueues"),
    [
        (True, False, "Preempted", True),
        (True, False, "PodsReadyTimeout", True),
        (False, True, "Preempted", True),  # preempted before the user suspended it
        # the deactivation the operator asked for, for the user's suspend
        (False, True, "Deactivated", False),
        (False, True, "InactiveWorkload", False),  # older Kueue's reason
        # an admin's (kueuectl stop workload), or Kueue's own past its requeuing limit
        (False, False, "Deactivated", True),
        (False, False, "DeactivatedDueToRequeuingLimitExceeded", True),
        # a deactivation that is over: active again, Evicted kept until it is admitted
        (True, False, "Deactivated", False),
        (True, False, None, False),
    ],
)
def test_which_evictions_are_kueues_hold_on_the_job(active, ours, reason, kueues):
    wl: dict[str, Any] = {
        "metadata": {"name": "wl", "annotations": {DEACTIVATED_BY_SUSPEND: "true"} if ours else {}},
        "spec": {"active": active},
        "status": {"conditions": [kq.cond("Evicted", True, reason)] if reason else []},
    }
    observed = observe_workload(wl)
    assert (observed.eviction is not None) is kueues
    assert (observed.evicted is not None) is (reason is not None), "Kueue's condition as it is"
