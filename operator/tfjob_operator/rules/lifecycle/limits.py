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
from tfjob_operator.rules.lifecycle.exits import Failure
from tfjob_operator.rules.statefulsets import StatefulSetObservation


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
    """What a finished job's run policy asks for: StatefulSets to scale to 0, the TFJob deleted,
    or a look again when its time to live runs out (seconds)."""

    scale_down: tuple[str, ...] = ()
    delete_job: bool = False
    requeue: tuple[float, ...] = ()


def after_finish(
    status: st.Status,
    policy: RunPolicy,
    statefulsets: Sequence[StatefulSetObservation],
    now: datetime,
) -> Cleanup:
    """cleanPodPolicy and ttlSecondsAfterFinished, for a job whose `status` is finished. Read
    from what exists and the lenient run policy: a job whose spec is invalid honours them too."""
    if not st.is_finished(status):
        return Cleanup()
    scale_down = (
        ()
        if policy.clean_pod_policy is CleanPodPolicy.NONE
        else tuple(s.name for s in statefulsets if s.replicas > 0)
    )
    if policy.ttl_seconds_after_finished is None:
        return Cleanup(scale_down)
    done_at = st.parse_timestamp(status.get("completionTime")) or now
    left = (done_at + timedelta(seconds=policy.ttl_seconds_after_finished) - now).total_seconds()
    if left <= 0:
        return Cleanup(scale_down, delete_job=True)
    return Cleanup(scale_down, requeue=(left,))
