"""Stops on request: an EXIT_STOPPED exit is never a failure; `status.lastStop` says why the
pods stopped (the operator's cause or the cluster's) and the step saved, with one `Stopped`
Event; a crash is no stop, and a job that is not stopping writes nothing more."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from tests.unit.operator.rules.kueue.test_workload import admit, evict, made, queued_job, view
from tests.unit.operator.rules.lifecycle.helpers import T0, Run, running
from tfjob_operator.api.spec import RestartPolicy
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle import is_retryable, stops
from tfjob_operator.rules.lifecycle.change import Condition
from tfjob_operator.rules.pods import observe
from tfjob_protocol import stop
from tfjob_testbed.core.jobs import pod, tfjob

SPEC = {"Chief": 1, "PS": 1, "Worker": 2}


def stopped(rt, index, step, *, last=False, **container):
    """A pod whose container saved at `step` and exited with EXIT_STOPPED (`last`: then it was
    restarted, and the exit is lastState's)."""
    if last:
        body = pod("mnist", rt, index, last_exit=stop.EXIT_STOPPED, restarts=1, **container)
        body["status"]["containerStatuses"][0]["lastState"]["terminated"]["message"] = stop.message(
            step
        )
        return body
    body = pod("mnist", rt, index, state="terminated", exit_code=stop.EXIT_STOPPED, **container)
    body["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = stop.message(step)
    return body


def deleting(body, at, reason=None, grace=120):
    """`body` being deleted since `at` (a drain, a preemption... when `reason` says so)."""
    body["metadata"]["deletionTimestamp"] = st.timestamp(at + timedelta(seconds=grace))
    body["metadata"]["deletionGracePeriodSeconds"] = grace
    if reason is not None:
        cond = {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": "m"}
        body["status"]["conditions"] = [cond]
    return body


@pytest.mark.parametrize("policy", ["Never", "OnFailure", "Always", "ExitCode"])
@pytest.mark.parametrize("last", [False, True], ids=["down", "restarted"])
def test_a_stop_is_never_a_failure(policy, last):
    run = Run(tfjob(replicas=SPEC, restart_policy=policy, run_policy={"backoffLimit": 0}))
    run.step(*running("mnist", SPEC))
    pods = running("mnist", SPEC)
    pods[-1] = stopped("worker", 1, 40, last=last)
    run.step(*pods)
    assert run.state() == "Running"
    assert run.status["restarts"] == 0 and "failure" not in run.status
    assert run.status["replicaStatuses"]["Worker"]["failed"] == 0
    assert "Restarting" not in run.reasons()
    assert run.status["lastStop"]["savedStep"] == 40


def test_a_crash_is_no_stop():
    run = Run(tfjob(replicas={"Worker": 1}, restart_policy="OnFailure"))
    run.step(pod("mnist", "worker", 0))
    run.step(pod("mnist", "worker", 0, state="terminated", exit_code=1))
    assert run.state() == "Restarting" and "lastStop" not in run.status
    assert run.status["replicaStatuses"]["Worker"]["failed"] == 1


def test_the_stop_rule_itself_allows_retries_under_any_policy():
    assert all(is_retryable(p, stop.EXIT_STOPPED) for p in RestartPolicy)


@pytest.mark.parametrize(
    ("reason", "cause", "message"),
    [
        ("EvictionByEvictionAPI", "Disrupted", "pod mnist-worker-1: EvictionByEvictionAPI: m"),
        ("PreemptionByScheduler", "Disrupted", "pod mnist-worker-1: PreemptionByScheduler: m"),
        ("DeletionByTaintManager", "Disrupted", "pod mnist-worker-1: DeletionByTaintManager: m"),
        ("TerminationByKubelet", "Disrupted", "pod mnist-worker-1: TerminationByKubelet: m"),
        (None, "PodDeleted", "pod mnist-worker-1 was deleted (by hand or by a controller)"),
    ],
)
def test_the_clusters_causes(reason, cause, message):
    begun = T0 - timedelta(seconds=7)  # the API server's time
    pods = [observe(p) for p in running("mnist", SPEC)]
    pods[-1] = observe(deleting(pod("mnist", "worker", 1), begun, reason))
    last = stops.last_stop({}, None, pods, T0)
    assert last == {"cause": cause, "message": message, "time": st.timestamp(begun)}


CHIEF = [observe(pod("mnist", "chief", 0))]
AT = st.timestamp(T0)
SUSPENDED = {"conditions": [{"type": "Suspended", "status": "True", "reason": "TFJobSuspended"}]}


@pytest.mark.parametrize(
    ("status", "why", "pods", "last"),
    [
        # the operator's own: suspended, or evicted by Kueue, while it has pods
        (
            {},
            Condition("Suspended", True, st.Reason.SUSPENDED, "TFJob x is suspended."),
            CHIEF,
            {"cause": "Suspended", "message": "TFJob x is suspended.", "time": AT},
        ),
        (
            {},
            Condition("Suspended", True, "Evicted", "TFJob x is evicted: Preempted"),
            CHIEF,
            {"cause": "Evicted", "message": "TFJob x is evicted: Preempted", "time": AT},
        ),
        # a job created suspended, or queued, stops nothing; one suspended already is told
        ({}, Condition("Suspended", True, "Queued", "queued"), [], None),
        (SUSPENDED, Condition("Suspended", True, st.Reason.SUSPENDED, "again"), CHIEF, None),
        # the container alone: its pod stays
        (
            {},
            None,
            [observe(stopped("chief", 0, 7))],
            {
                "cause": "ContainerStopped",
                "message": f"pod mnist-chief-0: {stops.CONTAINER_STOPPED_WHY}",
                "time": AT,
                "savedStep": 7,
            },
        ),
        # a pod lost with its node is the node's story (nodelost), not a stop
        (
            {},
            None,
            [replace(observe(deleting(pod("mnist", "chief", 0), T0)), lost_since=T0)],
            None,
        ),
    ],
)
def test_the_operators_causes(status, why, pods, last):
    assert stops.last_stop(status, why, pods, T0) == last


def test_deletions_that_begin_with_a_stop_join_it():
    """The operator's own stop (here a resize, recorded by `caused`) and a drain of the whole
    job: the pods' deletions that begin at once are that one stop, not one each."""
    resized = {"lastStop": stops.caused(stops.RESIZED, "Worker.replicas 2 -> 3", T0)}
    soon = [observe(deleting(pod("mnist", "chief", 0), T0 + timedelta(seconds=1)))]
    assert stops.last_stop(resized, None, soon, T0 + timedelta(seconds=2)) == resized["lastStop"]
    later = [observe(deleting(pod("mnist", "chief", 0), T0 + timedelta(minutes=5)))]
    assert stops.last_stop(resized, None, later, T0)["cause"] == "PodDeleted"

    drain = [
        observe(deleting(pod("mnist", rt, i), T0 + timedelta(seconds=i), "EvictionByEvictionAPI"))
        for rt, i in (("chief", 0), ("worker", 1), ("worker", 0))
    ]
    last = stops.last_stop({}, None, drain, T0)
    assert last["time"] == st.timestamp(T0) and "mnist-chief-0" in last["message"]


def test_a_restarts_deletions_are_never_another_cause_even_on_a_stale_status():
    """The reconcile after a resize may read the status from before its own `Resized` write:
    the pods it deletes for the restart are still that restart, not `PodDeleted`."""
    chief = observe(deleting(pod("mnist", "chief", 0), T0))
    assert stops.last_stop({}, None, [chief], T0, frozenset({chief.name})) is None
    older = {"lastStop": stops.caused(stops.SUSPENDED, "suspended", T0 - timedelta(hours=1))}
    kept = stops.last_stop(older, None, [chief], T0, frozenset({chief.name}))
    assert kept == older["lastStop"]


def test_a_drain_says_why_and_the_step_saved_once():
    run = Run(tfjob(replicas=SPEC))
    run.step(*running("mnist", SPEC))
    began = run.now
    pods = running("mnist", SPEC)
    pods[0] = deleting(pod("mnist", "chief", 0), began, "EvictionByEvictionAPI")
    d = run.step(*pods)
    assert run.status["lastStop"] == {
        "cause": "Disrupted",
        "message": "pod mnist-chief-0: EvictionByEvictionAPI: m",
        "time": st.timestamp(began),
    }
    assert d.patch == {"lastStop": run.status["lastStop"]}, "a stop begun costs one write"
    assert not run.step(*pods).patch, "seen again: nothing new"

    pods[0] = deleting(stopped("chief", 0, 1200), began, "EvictionByEvictionAPI")
    run.step(*pods)
    assert run.status["lastStop"]["savedStep"] == 1200
    assert run.events[-1] == (
        "Normal",
        "Stopped",
        "TFJob default/mnist stopped at step 1200 (Disrupted), saved; resumes from step 1200.",
    )
    for again in (pods, [pod("mnist", "chief", 0, uid="new"), *pods[1:]]):
        d = run.step(*again)
        assert "Stopped" not in [r for _, r, _ in d.events], "one Event per stop"
    assert run.reasons().count("Stopped") == 1
    assert run.state() == "Running" and run.status["restarts"] == 0


def test_a_stop_seen_only_in_a_deleted_pods_last_state():
    """The watch may fold a pod's exit into its deletion: the deleted pod's last state, kept
    by the controller, says what it saved."""
    run = Run(tfjob(replicas=SPEC))
    run.step(*running("mnist", SPEC))
    gone = observe(deleting(stopped("chief", 0, 300), run.now, "PreemptionByScheduler"))
    again = pod("mnist", "chief", 0, uid="new")  # its StatefulSet made it again
    run.step(again, *running("mnist", {"PS": 1, "Worker": 2}), departed=[gone])
    assert run.status["lastStop"]["cause"] == "Disrupted"
    assert run.status["lastStop"]["savedStep"] == 300
    assert run.reasons().count("Stopped") == 1
    assert run.status["restarts"] == 0


def test_suspend_records_the_stop_and_the_step_its_pods_saved():
    body = tfjob(replicas=SPEC)
    run = Run(body)
    run.step(*running("mnist", SPEC))
    body["spec"]["runPolicy"] = {"suspend": True}
    run.step(*running("mnist", SPEC))
    last = run.status["lastStop"]
    assert (last["cause"], last["time"]) == ("Suspended", st.timestamp(run.now))
    pods = [deleting(p, run.now) for p in running("mnist", SPEC)]
    pods[0] = deleting(stopped("chief", 0, 55), run.now)
    run.step(*pods)
    assert run.status["lastStop"] == {**last, "savedStep": 55}
    assert run.events[-1][2].startswith("TFJob default/mnist stopped at step 55 (Suspended)")
    run.step()
    body["spec"]["runPolicy"] = {"suspend": False}
    run.step()
    assert run.status["lastStop"]["savedStep"] == 55, "kept until the next stop"


def test_a_kueue_eviction_is_the_operators_stop():
    run = Run(queued_job())
    run.step(queue=view(run))
    wl = admit(made(run))
    run.step(*running("mnist", SPEC), queue=view(run, wl))
    run.step(*running("mnist", SPEC), queue=view(run, evict(wl)))
    assert run.status["lastStop"]["cause"] == "Evicted"
    assert "Preempted to fit cq-b" in run.status["lastStop"]["message"]


def test_a_job_that_is_not_stopping_writes_nothing_for_stops():
    run = Run(tfjob(replicas=SPEC))
    run.step(*running("mnist", SPEC))
    for _ in range(3):
        assert not run.step(*running("mnist", SPEC)).patch
    assert "lastStop" not in run.status
