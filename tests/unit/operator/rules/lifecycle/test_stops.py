"""Stops on request: an EXIT_STOPPED exit is never a failure; `status.lastStop` says why the
pods stopped (the operator's cause or the cluster's) and the step saved, with one `Stopped`
Event; a crash is no stop, and a job that is not stopping writes nothing more."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.unit.operator.rules.kueue.test_workload import admit, evict, made, queued_job, view
from tests.unit.operator.rules.lifecycle.decide_run import T0, Run, running
from tfjob_operator.api.spec import ReplicaType, RestartPolicy, TFJobStatus
from tfjob_operator.controller.projections import job_record
from tfjob_operator.rules import naming
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle import JobView, decide, is_retryable, stops
from tfjob_operator.rules.lifecycle.change import Condition
from tfjob_operator.rules.pods import observe
from tfjob_operator.rules.statefulsets import StatefulSetObservation
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
            {
                "cause": "Suspended",
                "message": "TFJob x is suspended.",
                "time": AT,
                "podUIDs": ["uid-mnist-chief-0"],
            },
        ),
        (
            {},
            Condition("Suspended", True, "Evicted", "TFJob x is evicted: Preempted"),
            CHIEF,
            {
                "cause": "Evicted",
                "message": "TFJob x is evicted: Preempted",
                "time": AT,
                "podUIDs": ["uid-mnist-chief-0"],
            },
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


@pytest.mark.parametrize(
    "began", [timedelta(hours=-1), timedelta(seconds=-3), timedelta(0), timedelta(hours=1)]
)
def test_the_operators_stop_takes_the_pods_it_names_whenever_their_deletion_began(began):
    """A stop of the operator's (here a resize, recorded by `caused`) takes the pods it names,
    whatever time the API server gives their deletion (its `time` is the operator's clock,
    never compared with it); a deletion of a pod it does not name is a stop of its own, even
    a second after."""
    chief, worker = observe(pod("mnist", "chief", 0)), observe(pod("mnist", "worker", 0))
    resized = {"lastStop": stops.caused(stops.RESIZED, "Worker 2 → 3", T0, [chief.uid])}
    ours = [observe(deleting(pod("mnist", "chief", 0), T0 + began))]
    assert stops.last_stop(resized, None, ours, T0) == resized["lastStop"]
    other = [observe(deleting(pod("mnist", "worker", 0), T0 + began))]
    assert stops.last_stop(resized, None, other, T0)["message"] == (
        f"pod {worker.name} was deleted (by hand or by a controller)"
    )


def test_a_drain_is_one_stop_begun_by_its_first_deletion_by_the_api_servers_clock():
    """A drain of the whole job: its deletions, seconds apart by the API server's clock, are
    one stop, whose time is the first's, in whatever order the pods are listed and whatever
    the operator's clock says."""
    drain = [
        observe(deleting(pod("mnist", rt, i), T0 + timedelta(seconds=s), "EvictionByEvictionAPI"))
        for rt, i, s in (("worker", 1, 1), ("worker", 0, 2), ("chief", 0, 0))
    ]
    last = stops.last_stop({}, None, drain, T0 + timedelta(hours=1))
    assert last["time"] == st.timestamp(T0) and "mnist-chief-0" in last["message"]
    assert stops.last_stop({"lastStop": last}, None, drain, T0 - timedelta(hours=1)) == last


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


class Story:
    """One job's reconciles, `decide` called as the operator calls it, under two clocks: the
    operator's (`now`) and the API server's (`api`), `skew` off it. `stops` is each stop
    `status.lastStop` recorded, as (cause, time), in order."""

    def __init__(self, body: dict[str, Any], skew: timedelta) -> None:
        self.body, self.skew, self.now = body, skew, T0
        self.stops: list[tuple[str, str]] = []

    def api(self) -> datetime:
        """The API server's time now."""
        return self.now + self.skew

    def step(self, *pods, departed=(), sets=(), after=timedelta(seconds=1)) -> None:
        self.now += after
        view = JobView.from_body(job_record(self.body))
        seen, gone = [observe(p) for p in pods], [observe(p) for p in departed]
        d = decide(view, seen, self.now, "cluster.local", statefulsets=sets, departed=gone)
        self.body["status"] = d.status
        TFJobStatus.model_validate(d.status)
        last = d.status.get("lastStop")
        if last and (not self.stops or self.stops[-1] != (last["cause"], last["time"])):
            self.stops.append((last["cause"], last["time"]))


LATER = timedelta(minutes=3)  # the second stop, by either clock


def drained(story: Story) -> list[tuple[str, str]]:
    """kubectl drain evicts the job's pods a second apart (the API server's clock), seen over
    three reconciles, the chief's last as it is gone; three minutes later, the chief made again
    is deleted by hand."""
    story.step(*running("mnist", SPEC))
    began, evict = story.api(), "EvictionByEvictionAPI"
    story.step(deleting(pod("mnist", "chief", 0), began, evict), *running("mnist", SPEC)[1:])
    worker1 = deleting(pod("mnist", "worker", 1), began + timedelta(seconds=1), evict)
    story.step(
        deleting(pod("mnist", "chief", 0), began, evict),
        pod("mnist", "ps", 0),
        pod("mnist", "worker", 0),
        worker1,
    )
    again = pod("mnist", "chief", 0, uid="chief-2")
    story.step(
        again,
        pod("mnist", "ps", 0),
        deleting(pod("mnist", "worker", 0), began + timedelta(seconds=2), evict),
        worker1,
        departed=[deleting(stopped("chief", 0, 100), began, evict)],
    )
    story.now += LATER
    by_hand = story.api()
    story.step(deleting(again, by_hand), pod("mnist", "ps", 0))
    return [("Disrupted", st.timestamp(began)), ("PodDeleted", st.timestamp(by_hand))]


def suspended(story: Story) -> list[tuple[str, str]]:
    """The job is suspended; its pods' deletions show over two reconciles; it is resumed while
    the chief still stops, and the workers show only once gone; three minutes later, the
    chief made again is deleted by hand."""
    story.step(*running("mnist", SPEC))
    story.body["spec"]["runPolicy"] = {"suspend": True}
    story.step(*running("mnist", SPEC))
    began, deleted = story.now, story.api()
    story.step(*(deleting(p, deleted) for p in running("mnist", SPEC)))
    chief = deleting(stopped("chief", 0, 55), deleted)
    story.body["spec"]["runPolicy"] = {"suspend": False}
    story.step(chief, *(deleting(p, deleted) for p in running("mnist", {"Worker": 2})))
    story.step(chief, departed=[deleting(p, deleted) for p in running("mnist", {"Worker": 2})])
    again = pod("mnist", "chief", 0, uid="chief-2")
    story.step(again, departed=[chief], after=LATER)
    by_hand = story.api()
    story.step(deleting(again, by_hand))
    return [("Suspended", st.timestamp(began)), ("PodDeleted", st.timestamp(by_hand))]


def drained_after_a_suspension(story: Story) -> list[tuple[str, str]]:
    """The job is suspended, resumed, its pods made again; a minute later kubectl drain evicts
    two of them a second apart (the API server's clock), seen over two reconciles."""
    story.step(*running("mnist", SPEC))
    story.body["spec"]["runPolicy"] = {"suspend": True}
    story.step(*running("mnist", SPEC))
    began, deleted = story.now, story.api()
    story.step(*(deleting(p, deleted) for p in running("mnist", SPEC)))
    story.body["spec"]["runPolicy"] = {"suspend": False}
    story.step()
    remade = [
        pod("mnist", rt.lower(), i, uid=f"{rt}-{i}-2") for rt, n in SPEC.items() for i in range(n)
    ]
    story.step(*remade)
    story.now += timedelta(minutes=1)
    drain, evict = story.api(), "EvictionByEvictionAPI"
    chief = deleting(copy.deepcopy(remade[0]), drain, evict)
    story.step(chief, *remade[1:])
    worker = deleting(copy.deepcopy(remade[-1]), drain + timedelta(seconds=1), evict)
    story.step(chief, *remade[1:-1], worker)
    return [("Suspended", st.timestamp(began)), ("Disrupted", st.timestamp(drain))]


def revision(body: dict[str, Any], rev: str, uid: str | None = None) -> dict[str, Any]:
    """`body` made from its StatefulSet's template revision `rev` (with `uid`, made again)."""
    body["metadata"]["labels"][naming.LABEL_REVISION] = rev
    if uid is not None:
        body["metadata"]["uid"] = uid
    return body


def templates(rev: str, workers: int) -> list[StatefulSetObservation]:
    """The job's StatefulSets, settled on template revision `rev`."""
    return [
        StatefulSetObservation(
            naming.replica_name("mnist", rt),
            f"uid-{rt.value}",
            n,
            generation=1,
            observed_generation=1,
            update_revision=rev,
        )
        for rt, n in ((ReplicaType.PS, 1), (ReplicaType.WORKER, workers))
    ]


def resized(story: Story) -> list[tuple[str, str]]:
    """Worker 2 → 3: the operator deletes the pods of the old template at once; a stale view
    asks for them again, then their deletions show over two reconciles, worker 1's only once
    it is gone; three minutes later, a pod of the new template is deleted by hand."""
    old = [
        revision(pod("mnist", rt, i), "old") for rt, i in (("ps", 0), ("worker", 0), ("worker", 1))
    ]
    story.step(*old, sets=templates("old", 2))
    story.body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3
    new = templates("new", 3)
    worker2 = revision(pod("mnist", "worker", 2), "new")
    story.step(*old, worker2, sets=new)
    began, deleted = story.now, story.api()  # the operator deletes them as it records it
    story.step(*old, worker2, sets=new)
    ps0, worker0, worker1 = (deleting(copy.deepcopy(p), deleted) for p in old)
    story.step(ps0, worker0, old[2], worker2, sets=new)
    remade = [
        revision(pod("mnist", rt, i), "new", f"{rt}-{i}-2")
        for rt, i in (("ps", 0), ("worker", 0), ("worker", 1))
    ]
    story.step(*remade[:2], worker2, departed=[worker1], sets=new)
    story.now += LATER
    by_hand = story.api()
    story.step(*remade[:2], deleting(remade[2], by_hand), worker2, sets=new)
    return [("Resized", st.timestamp(began)), ("PodDeleted", st.timestamp(by_hand))]


@pytest.mark.parametrize(
    "skew",
    [
        timedelta(minutes=-7),
        timedelta(minutes=-2),
        timedelta(0),
        timedelta(minutes=2),
        timedelta(minutes=7),
    ],
    ids=["api-7m", "api-2m", "same", "api+2m", "api+7m"],
)
@pytest.mark.parametrize(
    ("body", "story"),
    [
        (lambda: tfjob(replicas=SPEC), drained),
        (lambda: tfjob(replicas=SPEC), suspended),
        (lambda: tfjob(replicas=SPEC), drained_after_a_suspension),
        (lambda: tfjob(replicas={"PS": 1, "Worker": 2}), resized),
    ],
    ids=["drain", "suspend", "drain-after-suspend", "resize"],
)
def test_one_stop_per_stop_however_far_apart_the_two_clocks_are(
    body: Callable[[], dict[str, Any]],
    story: Callable[[Story], list[tuple[str, str]]],
    skew: timedelta,
):
    """The API server's clock minutes ahead of the operator's, or behind: one drain's, one
    suspension's, one restart's deletions are one stop each (the drain's time is its first
    deletion's, by the API server's clock; the operator's are by its own), and a deletion
    three minutes later is a stop of its own."""
    run = Story(body(), skew)
    expected = story(run)
    assert run.stops == expected
