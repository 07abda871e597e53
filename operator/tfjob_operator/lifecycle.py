"""The TFJob lifecycle as one pure function: (job, observed pods, now) -> what to do.

StatefulSet pods always restart, so the operator implements the TFJob semantics itself from the
containers' exits: success policy, restartPolicy per replica, backoffLimit, activeDeadlineSeconds,
suspend, cleanPodPolicy and ttlSecondsAfterFinished. The same rules serve any runner that can
report pods the same way.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from . import naming
from . import status as st
from .api import (
    CleanPodPolicy,
    ReplicaType,
    RestartPolicy,
    SpecError,
    TFJobSpec,
    parse_spec,
)
from .children import JobRef, Manifest, desired_children
from .pods import Exit, PodObservation


@dataclass(frozen=True)
class JobView:
    """A TFJob as read from the API: identity, parsed spec (or its problems), stored status."""

    ref: JobRef
    spec: TFJobSpec | None
    problems: tuple[str, ...]
    status: st.Status

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> JobView:
        meta = body.get("metadata") or {}
        ref = JobRef(meta.get("name", ""), meta.get("namespace", ""), meta.get("uid", ""))
        spec: TFJobSpec | None = None
        try:
            spec = parse_spec(body.get("spec"))
            problems = naming.check_job_name(ref.name, spec.replicas())
        except SpecError as e:
            problems = e.problems
        return cls(
            ref,
            spec if not problems else None,
            tuple(problems),
            copy.deepcopy(dict(body.get("status") or {})),
        )


@dataclass
class Decision:
    """Everything the operator should make true for one job, in one go."""

    status: st.Status
    children: list[Manifest] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    delete_job: bool = False
    requeue_after: float | None = None
    # The merge patch from the stored status to `status`; empty when nothing changed.
    patch: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Failure:
    pod: PodObservation
    exit: Exit

    def describe(self) -> str:
        reason = f" ({self.exit.reason})" if self.exit.reason else ""
        return (
            f"{self.pod.replica_type.value} pod {self.pod.name} exited with code "
            f"{self.exit.code}{reason}"
        )

    def info(self) -> dict[str, Any]:
        return {
            "replicaType": self.pod.replica_type.value,
            "pod": self.pod.name,
            "exitCode": self.exit.code,
            "reason": self.exit.reason,
        }


def is_retryable(policy: RestartPolicy, code: int) -> bool:
    """Whether a non-zero exit may be retried under a replica's restartPolicy."""
    if policy is RestartPolicy.NEVER:
        return False
    if policy is RestartPolicy.EXIT_CODE:
        return code >= 128  # signals and OOM kills; 1-127 are the program's own verdict
    return True


def _account_exits(
    status: st.Status, pods: list[PodObservation], spec: TFJobSpec
) -> tuple[list[_Failure], list[_Failure]]:
    """Fold the exits not seen before into the status; return (fatal, retryable) failures."""
    ledger: dict[str, Any] = status.setdefault("terminations", {})
    replica_statuses = status.setdefault("replicaStatuses", {})
    replicas = spec.replicas()
    fatal: list[_Failure] = []
    retryable: list[_Failure] = []
    for pod in pods:
        entry = ledger.get(pod.name)
        if entry is None or entry.get("uid") != pod.uid:
            entry = {"uid": pod.uid, "count": 0, "succeeded": False}
        fresh = pod.terminations - entry["count"]
        if fresh <= 0:
            ledger[pod.name] = entry
            continue
        # Exits that happened while nobody watched are gone from the pod; count what it shows.
        for ex in pod.known_exits()[-fresh:]:
            if ex.code == 0:
                entry = {**entry, "succeeded": True}
            elif is_retryable(replicas[pod.replica_type].restart_policy, ex.code):
                retryable.append(_Failure(pod, ex))
                rs = replica_statuses.setdefault(pod.replica_type.value, {})
                rs["restarts"] = rs.get("restarts", 0) + 1
            else:
                fatal.append(_Failure(pod, ex))
        ledger[pod.name] = {**entry, "count": pod.terminations}
    live = {p.name for p in pods}
    for name in [n for n in ledger if n not in live]:
        del ledger[name]
    return fatal, retryable


def _has_succeeded(status: st.Status, spec: TFJobSpec, job: str) -> bool:
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


def _is_down_after_failure(pod: PodObservation) -> bool:
    latest = pod.latest_exit
    return not pod.running and not pod.deleting and latest is not None and latest.code != 0


def _replica_counts(
    status: st.Status, pods: list[PodObservation], spec: TFJobSpec, frozen: bool
) -> None:
    old = status.get("replicaStatuses") or {}
    counts: dict[str, Any] = {}
    for rt in spec.replicas():
        prev = old.get(rt.value) or {}
        mine = [p for p in pods if p.replica_type is rt]
        active = sum(1 for p in mine if p.running and not p.deleting)
        if frozen:
            counts[rt.value] = {**prev, "active": active}
            continue
        latest = [p.latest_exit for p in mine if not p.running]
        counts[rt.value] = {
            "active": active,
            "succeeded": sum(1 for e in latest if e is not None and e.code == 0),
            "failed": sum(1 for e in latest if e is not None and e.code != 0),
            "restarts": prev.get("restarts", 0),
        }
    status["replicaStatuses"] = counts
    expected = sum(rs.replicas for rs in spec.replicas().values())
    status["activeReplicas"] = f"{sum(c['active'] for c in counts.values())}/{expected}"
    status["restarts"] = sum(c.get("restarts", 0) for c in counts.values())


def decide(
    job: JobView, observed: Iterable[PodObservation], now: datetime, cluster_domain: str
) -> Decision:
    """Compute the job's next status, its children and the side effects, from what is seen."""
    prior = job.status
    status = copy.deepcopy(prior)
    name = f"{job.ref.namespace}/{job.ref.name}"
    st.set_condition(
        status, st.Cond.CREATED, True, st.Reason.CREATED, f"TFJob {name} is created.", now
    )

    if job.spec is None:
        if not st.is_finished(status):
            st.set_condition(
                status,
                st.Cond.FAILED,
                True,
                st.Reason.INVALID_SPEC,
                "Invalid TFJob: " + "; ".join(job.problems),
                now,
            )
            status.setdefault("completionTime", st.timestamp(now))
        return _finish(prior, status)

    spec, policy = job.spec, job.spec.run_policy
    replicas = spec.replicas()
    pods = sorted(
        (
            p
            for p in observed
            if p.replica_type in replicas and p.index < replicas[p.replica_type].replicas
        ),
        key=lambda p: (p.replica_type.value, p.index),
    )
    was_finished = st.is_finished(status)
    requeue: list[float] = []

    if not was_finished:
        fatal, retryable = _account_exits(status, pods, spec)
        if policy.suspend:
            st.set_condition(
                status,
                st.Cond.SUSPENDED,
                True,
                st.Reason.SUSPENDED,
                f"TFJob {name} is suspended.",
                now,
            )
        else:
            if st.is_true(status, st.Cond.SUSPENDED):
                st.set_condition(
                    status,
                    st.Cond.SUSPENDED,
                    False,
                    st.Reason.RESUMED,
                    f"TFJob {name} is resumed.",
                    now,
                )
                status["startTime"] = st.timestamp(now)  # the deadline counts from the resume
            status.setdefault("startTime", st.timestamp(now))
            _advance(status, spec, pods, fatal, retryable, job.ref.name, name, now, requeue)

    finished = st.is_finished(status)
    if finished:
        status.setdefault("completionTime", st.timestamp(now))
    _replica_counts(status, pods, spec, frozen=was_finished)
    _waiting(status, pods, finished)

    decision = _finish(prior, status)
    decision.events += _waiting_events(prior, status)
    scaled_down = (policy.suspend and not finished) or (
        finished and policy.clean_pod_policy is not CleanPodPolicy.NONE
    )
    decision.children = desired_children(job.ref, spec, cluster_domain, scaled_down=scaled_down)
    if finished and policy.ttl_seconds_after_finished is not None:
        done_at = st.parse_timestamp(status.get("completionTime")) or now
        left = done_at + timedelta(seconds=policy.ttl_seconds_after_finished) - now
        if left.total_seconds() <= 0:
            decision.delete_job = True
        else:
            requeue.append(left.total_seconds())
    decision.requeue_after = min(requeue) if requeue else None
    return decision


def _advance(
    status: st.Status,
    spec: TFJobSpec,
    pods: list[PodObservation],
    fatal: list[_Failure],
    retryable: list[_Failure],
    job: str,
    name: str,
    now: datetime,
    requeue: list[float],
) -> None:
    """Move a running job forward: success, failure, deadline, restarting or running."""
    policy = spec.run_policy
    total_restarts = sum(
        rs.get("restarts", 0) for rs in (status.get("replicaStatuses") or {}).values()
    )
    started = st.parse_timestamp(status.get("startTime")) or now
    deadline_left = (
        None
        if policy.active_deadline_seconds is None
        else (started + timedelta(seconds=policy.active_deadline_seconds) - now).total_seconds()
    )
    if _has_succeeded(status, spec, job):
        who = (
            "every worker"
            if spec.success_policy == "AllWorkers"
            else (next((rt.value for rt in spec.replicas() if rt.is_chief_like), "worker 0"))
        )
        st.set_condition(
            status,
            st.Cond.SUCCEEDED,
            True,
            st.Reason.SUCCEEDED,
            f"TFJob {name} successfully completed: {who} exited 0.",
            now,
        )
    elif fatal:
        failure = fatal[0]
        rp = spec.replicas()[failure.pod.replica_type].restart_policy.value
        st.set_condition(
            status,
            st.Cond.FAILED,
            True,
            st.Reason.FAILED,
            f"TFJob {name} failed: {failure.describe()} under restartPolicy {rp}.",
            now,
        )
        status["failure"] = failure.info()
    elif policy.backoff_limit is not None and total_restarts > policy.backoff_limit:
        last = retryable[-1] if retryable else None
        detail = f"; last: {last.describe()}" if last else ""
        st.set_condition(
            status,
            st.Cond.FAILED,
            True,
            st.Reason.BACKOFF_LIMIT_EXCEEDED,
            f"TFJob {name} failed: {total_restarts} failure restarts exceed "
            f"backoffLimit {policy.backoff_limit}{detail}.",
            now,
        )
        if last:
            status["failure"] = last.info()
    elif deadline_left is not None and deadline_left <= 0:
        st.set_condition(
            status,
            st.Cond.FAILED,
            True,
            st.Reason.DEADLINE_EXCEEDED,
            f"TFJob {name} failed: it ran longer than activeDeadlineSeconds "
            f"({policy.active_deadline_seconds}s).",
            now,
        )
    else:
        if deadline_left is not None:
            requeue.append(deadline_left)
        down = [p for p in pods if _is_down_after_failure(p)]
        if down:
            culprit = (
                retryable[-1].describe()
                if retryable
                else _Failure(down[0], down[0].latest_exit or Exit(-1)).describe()
            )
            st.set_condition(
                status,
                st.Cond.RESTARTING,
                True,
                st.Reason.RESTARTING,
                f"TFJob {name} is restarting: {culprit}; "
                f"{total_restarts} failure restart(s) so far.",
                now,
            )
        else:
            expected = sum(rs.replicas for rs in spec.replicas().values())
            active = sum(1 for p in pods if p.running and not p.deleting)
            under_way = st.is_true(status, st.Cond.RUNNING) or st.is_true(
                status, st.Cond.RESTARTING
            )
            if active == expected or (under_way and active > 0):
                st.set_condition(
                    status,
                    st.Cond.RUNNING,
                    True,
                    st.Reason.RUNNING,
                    f"TFJob {name} is running.",
                    now,
                )


def _waiting(status: st.Status, pods: list[PodObservation], finished: bool) -> None:
    """Pods that cannot start, and why: a job stuck on a bad image or an unschedulable GPU
    request says so in its own status instead of staying Created in silence."""
    waiting = {} if finished else {p.name: p.stuck.describe() for p in pods if p.stuck}
    if waiting:
        status["waiting"] = waiting
    else:
        status.pop("waiting", None)


def _waiting_events(prior: st.Status, status: st.Status) -> list[tuple[str, str, str]]:
    """One Warning per pod that starts waiting. Kubelets alternate ErrImagePull and
    ImagePullBackOff, so a new reason for a pod already waiting is no news."""
    before = prior.get("waiting") or {}
    return [
        ("Warning", st.Reason.POD_WAITING, f"Pod {pod} cannot start: {why}")
        for pod, why in sorted((status.get("waiting") or {}).items())
        if pod not in before
    ]


def _finish(prior: st.Status, status: st.Status) -> Decision:
    events = [
        (
            "Warning" if c.get("reason") in st.WARNING_REASONS else "Normal",
            c.get("reason", c["type"]),
            c.get("message", ""),
        )
        for c in st.announced(prior, status)
    ]
    return Decision(status=status, events=events, patch=st.merge_patch(prior, status))
