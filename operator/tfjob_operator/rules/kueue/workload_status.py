"""The Workload's status the operator writes, as Kueue's own job controllers do: the quota
given back after an eviction, PodsReady as the pods come up, Finished at the end."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from tfjob_operator.rules import status as st
from tfjob_operator.rules.kueue.admission import WorkloadCondition, WorkloadObservation

# Eviction reasons after which Kueue's job controllers mark the Workload Requeued=True.
REQUEUED_REASONS = ("Preempted", "NodeFailures")
MESSAGE_LIMIT = 32768  # metav1.Condition's message limit


def _condition(type_: str, status: bool, reason: str, message: str, now: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "lastTransitionTime": now,
    }


def _set(conditions: list[dict[str, Any]], new: dict[str, Any]) -> bool:
    """Set one condition the way Kubernetes' meta.SetStatusCondition does; True if changed."""
    for i, c in enumerate(conditions):
        if c.get("type") != new["type"]:
            continue
        same = all(c.get(k) == new[k] for k in ("status", "reason", "message"))
        if same:
            return False
        if c.get("status") == new["status"]:
            new = {
                **new,
                "lastTransitionTime": c.get("lastTransitionTime", new["lastTransitionTime"]),
            }
        conditions[i] = new
        return True
    conditions.append(new)
    return True


def workload_status(
    observed: WorkloadObservation,
    *,
    active_pods: int,
    pods_ready: bool,
    finished: tuple[bool, str] | None,
    now: datetime,
) -> dict[str, Any]:
    """The Workload status patch the job's state calls for; {} when nothing changes.

    - evicted, and no pod of the job active any more: the quota reservation is given back
      (QuotaReserved False, admission cleared, Admitted False, Requeued), as Kueue's job
      controllers do;
    - PodsReady (Kueue's waitForPodsReady reads it): while Admitted, it follows the pods; else
      False, WaitForStart, so that a readmitted job waits for its start, not its recovery;
    - finished (succeeded?, message): Finished True, so that the quota frees at once.
    """
    stamp = st.timestamp(now)
    conditions = [json.loads(c) for c in observed.conditions]
    patch: dict[str, Any] = {}
    changed = False
    if finished is not None:
        ok, message = finished
        return finished_patch(observed, "Succeeded" if ok else "Failed", message, now)
    else:
        admitted = observed.is_true("Admitted")
        if observed.evicted is not None and observed.reserved and active_pods == 0:
            changed |= _give_back(observed, observed.evicted, conditions, patch, stamp)
            admitted = False
        changed |= _set(conditions, _pods_ready(observed, admitted, pods_ready, stamp))
    if not changed:
        return {}
    patch["conditions"] = conditions
    return {"metadata": {"resourceVersion": observed.resource_version}, "status": patch}


def finished_patch(
    observed: WorkloadObservation, reason: str, message: str, now: datetime
) -> dict[str, Any]:
    """The patch that marks the Workload Finished (its quota frees at once); {} once it is."""
    if observed.finished:
        return {}
    conditions = [json.loads(c) for c in observed.conditions]
    _set(conditions, _condition("Finished", True, reason, message, st.timestamp(now)))
    return {
        "metadata": {"resourceVersion": observed.resource_version},
        "status": {"conditions": conditions},
    }


def _give_back(
    observed: WorkloadObservation,
    ev: WorkloadCondition,
    conditions: list[dict[str, Any]],
    patch: dict[str, Any],
    stamp: str,
) -> bool:
    """An evicted Workload whose pods are all gone gives its quota reservation back:
    Requeued after `ev` (the Evicted condition), QuotaReserved False, Admitted False, the
    admission cleared (into `patch`)."""
    changed = _set(
        conditions,
        _condition("Requeued", ev.reason in REQUEUED_REASONS, ev.reason, ev.message, stamp),
    )
    changed |= _set(conditions, _condition("QuotaReserved", False, "Pending", ev.message, stamp))
    if observed.is_true("Admitted"):
        message = "The workload has no reservation"
        changed |= _set(conditions, _condition("Admitted", False, "NoReservation", message, stamp))
    if observed.has_admission:
        patch["admission"] = None
        changed = True
    return changed


def _pods_ready(
    observed: WorkloadObservation, admitted: bool, pods_ready: bool, stamp: str
) -> dict[str, Any]:
    """PodsReady as Kueue's jobframework writes it: WaitForStart while not Admitted (queued,
    or its reservation given back after an eviction); once Admitted, Started or Recovered once
    every pod is up, WaitForRecovery after one failed, WaitForStart before."""
    prior = observed.condition("PodsReady")
    if not admitted:
        pods_ready = False
        prior = None
    if pods_ready:
        recovering = prior is not None and prior.reason in ("WaitForRecovery", "Recovered")
        return _condition(
            "PodsReady",
            True,
            "Recovered" if recovering else "Started",
            "All pods reached readiness and the workload is running",
            stamp,
        )
    if prior is not None and (prior.status == "True" or prior.reason == "WaitForRecovery"):
        return _condition(
            "PodsReady",
            False,
            "WaitForRecovery",
            "At least one pod has failed, waiting for recovery",
            stamp,
        )
    return _condition(
        "PodsReady", False, "WaitForStart", "Not all pods are ready or succeeded", stamp
    )
