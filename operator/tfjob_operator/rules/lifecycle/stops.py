"""Stops on request: pods stopped, not failed, and why (`status.lastStop`).

A trainer that gets SIGTERM saves, writes the step to its termination message and exits with
`EXIT_STOPPED` (tfjob_protocol.stop), which is never a failure (`exits` skips it). This says
why the pods stopped and from which step the job resumes, with one `Stopped` Event once that
step is known. A stop is the operator's (the job suspended, evicted by Kueue, resized) or the
cluster's (a pod deleted: drained, preempted, by hand); a crash is none.

Which deletions make one stop is told without comparing the operator's clock with the API
server's, which may be minutes apart: a stop of the operator's names the pods it takes
(`podUIDs`: those it stops, and those already being deleted as it begins), and their deletions
are part of it whenever they come; a stop of the cluster's begins with a pod's deletion, its
`time` is that deletion's by the API server's clock, and it takes the deletions that begin
within `SAME_STOP` of it by the same clock. Any other deletion begins a stop of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle.change import Condition
from tfjob_operator.rules.lifecycle.exits import fresh_exits
from tfjob_operator.rules.pods import Exit, PodObservation

# The operator's causes.
SUSPENDED = "Suspended"
EVICTED = "Evicted"
RESIZED = "Resized"
# The cluster's: the pod's DisruptionTarget condition says who (a drain, a preemption, a
# taint, the kubelet); a deletion with no such word was by hand or by another controller.
DISRUPTED = "Disrupted"
POD_DELETED = "PodDeleted"
# The container alone was stopped and its pod stays (a failed liveness probe, a signal).
CONTAINER_STOPPED = "ContainerStopped"
# The cluster's stops: their `time` is when the deletion that began them began, on the API
# server's clock, never compared with the operator's.
CLUSTER = frozenset({DISRUPTED, POD_DELETED})
# A deletion that begins, by the API server's clock, this soon after the one that began the
# cluster's stop last recorded is part of it: a drain evicts a job's pods together.
SAME_STOP = timedelta(seconds=5)
# The operator's stops that hold the job stopped: every pod deleted meanwhile is theirs.
HOLDING = frozenset({SUSPENDED, EVICTED})
REASON = "Stopped"  # the Event, once the step saved is known


def caused(cause: str, message: str, now: datetime, pods: Iterable[str] = ()) -> dict[str, Any]:
    """A stop the operator causes (`status.lastStop`), at `now` by its own clock: for people,
    never compared with a deletion's time. `pods`: the uids of the pods it takes, those it
    stops and those already being deleted as it begins; their deletions are this stop (or
    one before it) whenever the API server says they began, any other deletion is a new one.
    A rule that deletes pods on purpose records it in the decision that deletes them."""
    last: dict[str, Any] = {"cause": cause, "message": message, "time": st.timestamp(now)}
    uids = sorted({uid for uid in pods if uid})
    if uids:
        last["podUIDs"] = uids
    return last


def taking(last: Mapping[str, Any], pods: Iterable[str]) -> dict[str, Any]:
    """`last` taking these pods too (uids): the same stop, seen whole at last."""
    taken = set(last.get("podUIDs") or ())
    more = {uid for uid in pods if uid} - taken
    return {**last, "podUIDs": sorted(taken | more)} if more else dict(last)


def last_stop(
    status: st.Status,
    why: Condition | None,
    pods: Sequence[PodObservation],
    now: datetime,
    restarting: frozenset[str] = frozenset(),
) -> dict[str, Any] | None:
    """`status.lastStop` after what this reconcile saw; `status` is read before its new exits
    are counted. `why`: the operator stops the job itself (suspended, held by Kueue); `pods`
    include those deleted since the last reconcile (only their deletion showed their end);
    `restarting`: pods the operator deletes for a restart (`restart`), whose deletion is its
    own stop even when the status read here does not show that stop yet."""
    last = status.get("lastStop")
    deleting = [p for p in pods if p.deleting]
    if why is not None and pods and not st.is_true(status, st.Cond.SUSPENDED):
        cause = SUSPENDED if why.reason == st.Reason.SUSPENDED else EVICTED
        last = caused(cause, why.message, now, (p.uid for p in pods))
    elif why is not None and last is not None and last.get("cause") in HOLDING:
        # A pod made after the stop began, and deleted with the rest.
        last = taking(last, (p.uid for p in deleting))
    if why is None:
        for pod in sorted(deleting, key=_deletion_order):
            if pod.name not in restarting and pod.lost_since is None and _new(pod, last):
                # `now` only stands in: a pod being deleted always has its deletionTimestamp.
                last = _deleted(pod, pod.deleted_at or now)
    steps = []
    for pod, ex in fresh_stops(status.get("terminations") or {}, pods):
        if why is None and not pod.deleting:
            message = f"pod {pod.name}: {CONTAINER_STOPPED_WHY}"
            last = caused(CONTAINER_STOPPED, message, now, (p.uid for p in deleting))
        if ex.saved_step is not None:
            steps.append(ex.saved_step)
    if last is not None and steps and last.get("savedStep") is None:
        last = {**last, "savedStep": max(steps)}
    return last


CONTAINER_STOPPED_WHY = "its container was stopped while the pod stayed (a liveness probe?)"


def _deletion_order(pod: PodObservation) -> tuple[bool, datetime]:
    """Deletions in the order the API server says they began: the first begins a stop."""
    return (pod.deleted_at is None, pod.deleted_at or datetime.min.replace(tzinfo=UTC))


def _new(pod: PodObservation, last: Mapping[str, Any] | None) -> bool:
    """Whether the pod's deletion begins a stop of its own: not one the operator's last stop
    takes (`podUIDs`), nor one that began within SAME_STOP of the cluster's last stop, both
    times the API server's. The operator's `time` is never compared with a deletion's: after
    its stop, a deletion of a pod it did not take is new, however soon it came."""
    if last is None:
        return True
    if pod.uid in (last.get("podUIDs") or ()):
        return False
    if last.get("cause") not in CLUSTER:
        return True
    began = st.parse_timestamp(last.get("time"))
    if began is None or pod.deleted_at is None:
        return False  # not to be ordered (the API server always writes both)
    return pod.deleted_at > began + SAME_STOP


def _deleted(pod: PodObservation, at: datetime) -> dict[str, Any]:
    if pod.disruption:
        return caused(DISRUPTED, f"pod {pod.name}: {pod.disruption}", at)
    return caused(POD_DELETED, f"pod {pod.name} was deleted (by hand or by a controller)", at)


def fresh_stops(
    ledger: Mapping[str, Any], pods: Sequence[PodObservation]
) -> list[tuple[PodObservation, Exit]]:
    """Each stop exit that the ledger has not counted yet, with its pod."""
    found = []
    for pod in pods:
        entry = ledger.get(pod.name) or {}
        fresh = pod.terminations - (entry.get("count", 0) if entry.get("uid") == pod.uid else 0)
        if fresh > 0:
            found += [(pod, ex) for ex in fresh_exits(pod, fresh) if ex.stopped]
    return found


def stop_events(prior: st.Status, status: st.Status, name: str) -> list[tuple[str, str, str]]:
    """One Normal Event per stop, when the step it saved becomes known."""
    new, old = status.get("lastStop") or {}, prior.get("lastStop") or {}
    step = new.get("savedStep")
    if step is None or all(old.get(k) == new.get(k) for k in ("cause", "time", "savedStep")):
        return []
    cause = new["cause"]
    message = f"TFJob {name} stopped at step {step} ({cause}), saved; resumes from step {step}."
    return [("Normal", REASON, message)]
