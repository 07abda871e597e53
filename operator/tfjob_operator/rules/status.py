"""The TFJob status: condition types and reasons (defined once), and how conditions change.

Conditions follow Kubeflow's shape and rules: Running and Restarting replace each other, and
Succeeded or Failed turn Running to False, so the list reads as the job's history.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

Status = dict[str, Any]


class Cond:
    CREATED = "Created"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"
    # The operator keeps failing to reconcile the job (API errors, RBAC); False once it heals.
    RECONCILE_ERROR = "ReconcileError"
    # Another controller's pods or Services already run the job; False once they are gone.
    STARTED_ELSEWHERE = "StartedElsewhere"
    # An edit made a running job's spec invalid: it runs on as before; False once fixed.
    SPEC_REJECTED = "SpecRejected"


class Reason:
    CREATED = "TFJobCreated"
    RUNNING = "TFJobRunning"
    RESTARTING = "TFJobRestarting"
    SUCCEEDED = "TFJobSucceeded"
    FAILED = "TFJobFailed"
    SUSPENDED = "TFJobSuspended"
    RESUMED = "TFJobResumed"
    INVALID_SPEC = "InvalidSpec"
    INVALID_EDIT = "InvalidEdit"
    SPEC_ACCEPTED = "SpecAccepted"
    BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
    DEADLINE_EXCEEDED = "DeadlineExceeded"
    POD_WAITING = "PodWaiting"  # an Event only: a pod cannot start (bad image, no node fits)
    RECONCILE_ERROR = "ReconcileError"
    RECONCILED = "Reconciled"
    SPEC_ADJUSTED = "SpecAdjusted"  # an Event only: the operator replaced what the user wrote
    SPEC_IGNORED = "SpecIgnored"  # an Event only: a finished job's spec was edited
    FOREIGN_CHILDREN = "ForeignChildren"
    HANDED_OVER = "HandedOver"
    MANAGED_ELSEWHERE = "ManagedElsewhere"  # an Event only: runPolicy.managedBy names another
    DISPATCHED = "DispatchedByMultiKueue"  # an Event only: spec.managedBy is MultiKueue's
    NOT_DISPATCHED = "NotDispatched"  # an Event only: ... but the job waits in no LocalQueue
    # An Event only: Kueue's pod or StatefulSet integration gated or relabelled a child.
    KUEUE_TOOK_OVER_CHILD = "KueueTookOverChild"
    # Suspended by Kueue: waiting for admission, evicted (preempted, ...), admitted.
    QUEUED = "Queued"
    EVICTED = "Evicted"
    ADMITTED = "Admitted"


TERMINAL = (Cond.SUCCEEDED, Cond.FAILED)
# Conditions whose arrival is bad news get Warning events.
WARNING_REASONS = {
    Reason.RESTARTING,
    Reason.FAILED,
    Reason.INVALID_SPEC,
    Reason.INVALID_EDIT,
    Reason.BACKOFF_LIMIT_EXCEEDED,
    Reason.DEADLINE_EXCEEDED,
    Reason.RECONCILE_ERROR,
    Reason.FOREIGN_CHILDREN,
    Reason.EVICTED,
}
# Conditions whose turning False is news too: a resume, a reconcile that heals.
ANNOUNCED_WHEN_FALSE = {
    Reason.RESUMED,
    Reason.RECONCILED,
    Reason.HANDED_OVER,
    Reason.ADMITTED,
    Reason.SPEC_ACCEPTED,
}


def timestamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_timestamp(value: object) -> datetime | None:
    """Any time the API server writes (`2026-01-02T03:04:05Z`, a Lease's microseconds), as an
    aware datetime; None for no time or one that is not a time."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def find(status: Status, cond_type: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c.get("type") == cond_type), None)


def is_true(status: Status, cond_type: str) -> bool:
    cond = find(status, cond_type)
    return cond is not None and cond.get("status") == "True"


def is_finished(status: Status) -> bool:
    return any(is_true(status, t) for t in TERMINAL)


def set_condition(
    status: Status, cond_type: str, value: bool, reason: str, message: str, now: datetime
) -> bool:
    """Set one condition in place, Kubeflow style; return True if anything changed."""
    want = "True" if value else "False"
    conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
    old = find(status, cond_type)
    if old is not None and old.get("status") == want and old.get("reason") == reason:
        return False
    if old is None and not value:
        return False
    ts = timestamp(now)
    transition = old["lastTransitionTime"] if old and old.get("status") == want else ts
    kept: list[dict[str, Any]] = []
    for c in conditions:
        if c["type"] == cond_type:
            continue
        if {c["type"], cond_type} == {Cond.RUNNING, Cond.RESTARTING} and value:
            continue
        if (
            c["type"] == Cond.RUNNING
            and value
            and cond_type in (*TERMINAL, Cond.SUSPENDED)
            and c.get("status") == "True"
        ):
            c = {**c, "status": "False", "lastUpdateTime": ts, "lastTransitionTime": ts}
        kept.append(c)
    kept.append(
        {
            "type": cond_type,
            "status": want,
            "reason": reason,
            "message": message,
            "lastUpdateTime": ts,
            "lastTransitionTime": transition,
        }
    )
    status["conditions"] = _newest_true_last(kept)
    return True


def _newest_true_last(conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`kubectl get` shows the last condition's type as STATE, whatever its status: a list
    that ends in False conditions (after a resume, or a healed error) moves them to the front,
    so STATE names the newest condition that holds."""
    tail = len(conditions)
    while tail > 0 and conditions[tail - 1].get("status") != "True":
        tail -= 1
    if tail in (0, len(conditions)):
        return conditions
    return conditions[tail:] + conditions[:tail]


def announced(before: Status, after: Status) -> list[dict[str, Any]]:
    """Conditions worth an Event: newly true (or true for a new reason), or a resume."""
    seen = {(c["type"], c["status"], c.get("reason")) for c in before.get("conditions") or []}
    return [
        c
        for c in after.get("conditions") or []
        if (c["type"], c["status"], c.get("reason")) not in seen
        and (c["status"] == "True" or c.get("reason") in ANNOUNCED_WHEN_FALSE)
    ]


def state(status: Status) -> str:
    """The newest condition that is true: what `kubectl get tfj` shows as State."""
    for c in reversed(status.get("conditions") or []):
        if c.get("status") == "True":
            return str(c["type"])
    return ""


def merge_patch(old: Any, new: Any) -> Any:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return copy.deepcopy(new)
    patch: dict[str, Any] = {k: None for k in old if k not in new}
    for k, v in new.items():
        if k not in old:
            patch[k] = copy.deepcopy(v)
        elif old[k] != v:
            patch[k] = merge_patch(old[k], v)
    return patch


def changes(before: Status, after: Status) -> dict[str, Any]:
    """What a status write tells about the job's life, for the job metrics: which of
    created, succeeded and failed it newly is, how many failure restarts it adds, and how
    long the job ran when it has just finished."""
    news = {c: is_true(after, c) and not is_true(before, c) for c in (Cond.CREATED, *TERMINAL)}
    restarted = max(0, int(after.get("restarts") or 0) - int(before.get("restarts") or 0))
    duration = None
    if news[Cond.SUCCEEDED] or news[Cond.FAILED]:
        start = parse_timestamp(after.get("startTime"))
        end = parse_timestamp(after.get("completionTime"))
        if start is not None and end is not None:
            duration = max(0.0, (end - start).total_seconds())
    return {
        "created": news[Cond.CREATED],
        "succeeded": news[Cond.SUCCEEDED],
        "failed": news[Cond.FAILED],
        "restarted": restarted,
        "duration": duration,
    }


# Fields that count pods and change with every pod that comes up or goes away.
COUNTS = frozenset({"activeReplicas", "replicaStatuses"})


def counts_only(patch: dict[str, Any]) -> bool:
    """Whether a status patch changes nothing but the pod counts: no condition, no exit, no
    waiting pod. Such a patch can wait a moment and fold the next pods' changes into one
    write instead of one per pod."""
    return bool(patch) and set(patch) <= COUNTS
