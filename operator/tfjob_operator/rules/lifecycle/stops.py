"""Stops on request: pods stopped, not failed, and why (`status.lastStop`).

A trainer that gets SIGTERM saves, writes the step to its termination message and exits with
`EXIT_STOPPED` (tfjob_protocol.stop), which is never a failure (`exits` skips it). This says
why the pods stopped and from which step the job resumes, with one `Stopped` Event once that
step is known. A stop is the operator's (the job suspended, evicted by Kueue, resized) or the
cluster's (a pod deleted: drained, preempted, by hand); a crash is none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
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
# A deletion that begins this soon after the stop last recorded is part of it: the operator
# deletes the pods of a stop it records at once, a drain evicts a job's pods together, and a
# deletion's time is the API server's clock, not ours.
SAME_STOP = timedelta(seconds=5)
REASON = "Stopped"  # the Event, once the step saved is known


def caused(cause: str, message: str, now: datetime) -> dict[str, Any]:
    """A stop the operator causes (`status.lastStop`). A rule that deletes pods on purpose
    records it in the decision that deletes them: their deletions then join it."""
    return {"cause": cause, "message": message, "time": st.timestamp(now)}


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
    if why is not None and pods and not st.is_true(status, st.Cond.SUSPENDED):
        last = caused(SUSPENDED if why.reason == st.Reason.SUSPENDED else EVICTED, why.message, now)
    for pod in pods:
        if pod.name in restarting:
            continue
        if why is None and pod.deleting and pod.lost_since is None and _new(pod, last):
            last = _deleted(pod, pod.deleted_at or now)
    steps = []
    for pod, ex in fresh_stops(status.get("terminations") or {}, pods):
        if why is None and not pod.deleting:
            last = caused(CONTAINER_STOPPED, f"pod {pod.name}: {CONTAINER_STOPPED_WHY}", now)
        if ex.saved_step is not None:
            steps.append(ex.saved_step)
    if last is not None and steps and last.get("savedStep") is None:
        last = {**last, "savedStep": max(steps)}
    return last


CONTAINER_STOPPED_WHY = "its container was stopped while the pod stayed (a liveness probe?)"


def _new(pod: PodObservation, last: Mapping[str, Any] | None) -> bool:
    """Whether the pod's deletion began after the stop last recorded, not as part of it."""
    began = st.parse_timestamp((last or {}).get("time"))
    if began is None or pod.deleted_at is None:
        return began is None
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
