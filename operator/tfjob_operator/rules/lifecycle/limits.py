"""The limits a TFJob's spec puts on its run, all enforced here: when it has succeeded
(successPolicy), when it has failed too often (backoffLimit) or run too long
(activeDeadlineSeconds), and what goes once it has finished (cleanPodPolicy, then the TFJob
itself after ttlSecondsAfterFinished)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from tfjob_operator.api.spec import CleanPodPolicy, ReplicaType, RunPolicy, TFJobSpec
from tfjob_operator.rules import naming
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle.change import Change, Condition
from tfjob_operator.rules.lifecycle.ended import waits_for_others
from tfjob_operator.rules.lifecycle.exits import Failure
from tfjob_operator.rules.pods import PodObservation
from tfjob_operator.rules.statefulsets import StatefulSetObservation

# The grace period of a finished job's pod whose task is done (it exited 0): the kubelet's least.
DONE_GRACE_SECONDS = 1


def has_succeeded(status: st.Status, spec: TFJobSpec, job: str) -> bool:
    """Whether the pods that the success policy names have exited 0 (as the ledger says)."""
    ledger = status.get("terminations") or {}
    replicas = spec.replicas()

    def done(rt: ReplicaType, index: int) -> bool:
        return bool((ledger.get(naming.pod_name(job, rt, index)) or {}).get("succeeded"))

    if spec.success_policy == "AllWorkers":
        workers = replicas[ReplicaType.WORKER].replicas
        return workers > 0 and all(done(ReplicaType.WORKER, i) for i in range(workers))
    chiefs = [rt for rt in replicas if rt.is_chief_like and replicas[rt].replicas > 0]
    if chiefs:
        return all(done(rt, 0) for rt in chiefs)
    return done(ReplicaType.WORKER, 0)


def succeeded(spec: TFJobSpec, name: str) -> Condition:
    who = (
        "every worker"
        if spec.success_policy == "AllWorkers"
        else (next((rt.value for rt in spec.replicas() if rt.is_chief_like), "worker 0"))
    )
    return Condition(
        st.Cond.SUCCEEDED,
        True,
        st.Reason.SUCCEEDED,
        f"TFJob {name} successfully completed: {who} exited 0.",
    )


def backoff_exceeded(
    policy: RunPolicy, restarts: int, retryable: Sequence[Failure], name: str
) -> Change | None:
    """The job's failure, once its failure restarts exceed backoffLimit; None until then."""
    if policy.backoff_limit is None or restarts <= policy.backoff_limit:
        return None
    last = retryable[-1] if retryable else None
    detail = f"; last: {last.describe()}" if last else ""
    failed = Condition(
        st.Cond.FAILED,
        True,
        st.Reason.BACKOFF_LIMIT_EXCEEDED,
        f"TFJob {name} failed: {restarts} failure restarts exceed "
        f"backoffLimit {policy.backoff_limit}{detail}.",
    )
    return Change((failed,), {"failure": last.info()} if last else {})


def deadline_left(status: st.Status, policy: RunPolicy, now: datetime) -> float | None:
    """Seconds left before activeDeadlineSeconds, counted from the (last) start; None: none."""
    if policy.active_deadline_seconds is None:
        return None
    started = st.parse_timestamp(status.get("startTime")) or now
    return (started + timedelta(seconds=policy.active_deadline_seconds) - now).total_seconds()


def deadline_exceeded(policy: RunPolicy, name: str) -> Condition:
    return Condition(
        st.Cond.FAILED,
        True,
        st.Reason.DEADLINE_EXCEEDED,
        f"TFJob {name} failed: it ran longer than activeDeadlineSeconds "
        f"({policy.active_deadline_seconds}s).",
    )


@dataclass(frozen=True)
class Cleanup:
    """What a finished job's run policy asks for: StatefulSets to scale to 0, the pods whose
    task is done (name, uid) ended at once (`done_pods`), the TFJob deleted, or a look again
    when its time to live runs out (seconds)."""

    scale_down: tuple[str, ...] = ()
    delete_job: bool = False
    requeue: tuple[float, ...] = ()
    done: tuple[tuple[str, str], ...] = ()


def after_finish(
    status: st.Status,
    policy: RunPolicy,
    statefulsets: Sequence[StatefulSetObservation],
    now: datetime,
    pods: Sequence[PodObservation] = (),
) -> Cleanup:
    """cleanPodPolicy and ttlSecondsAfterFinished, for a job whose `status` is finished. Read
    from what exists and the lenient run policy: a job whose spec is invalid honours them too."""
    if not st.is_finished(status):
        return Cleanup()
    scale_down: tuple[str, ...] = ()
    done: tuple[tuple[str, str], ...] = ()
    requeue: tuple[float, ...] = ()
    done_at = st.parse_timestamp(status.get("completionTime")) or now
    if policy.clean_pod_policy is not CleanPodPolicy.NONE:
        # A done pod's other containers (Katib's collector) finish their work first, a while.
        waiting, wait = waits_for_others(pods, done_at, now)
        scale_down = tuple(s.name for s in statefulsets if s.replicas > 0 and s.name not in waiting)
        requeue = (wait,) if wait is not None else ()
        done = done_pods(pods)
    if policy.ttl_seconds_after_finished is None:
        return Cleanup(scale_down, requeue=requeue, done=done)
    left = (done_at + timedelta(seconds=policy.ttl_seconds_after_finished) - now).total_seconds()
    if left <= 0:
        return Cleanup(scale_down, delete_job=True, done=done)
    return Cleanup(scale_down, requeue=(*requeue, left), done=done)


def done_pods(pods: Sequence[PodObservation]) -> tuple[tuple[str, str], ...]:
    """The pods, going with their finished job, whose task is done: its latest exit was 0,
    and its container has no restart rules to keep it down (no finalizer of ours: made on a
    server without them, `lifecycle.ended`; nor has it ended for good). The kubelet runs that
    container again, often just as the scale-down's SIGTERM comes: a process that has not yet
    set a handler for it (and, as PID 1, ignores it) would run on for the whole grace period,
    holding its node and GPU, to repeat work that is done. Such pods are deleted with
    DONE_GRACE_SECONDS, once."""
    return tuple(
        (p.name, p.uid)
        for p in pods
        if p.latest_exit is not None
        and p.latest_exit.code == 0
        and not (p.finalized or p.ended)
        and not (p.deleting and p.grace is not None and p.grace <= DONE_GRACE_SECONDS)
    )
