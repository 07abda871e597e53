"""Pods on a node that stopped answering: how the operator tells, and when it lets them go.

A StatefulSet makes `<job>-worker-1` again only once the old pod is gone, and only the old
pod's kubelet can confirm that. When a node dies or is cut off, its pods stay (at most marked
for deletion, `Terminating`) and the job would hang. Kubernetes' node controller, once the node
misses its heartbeats, sets each of its pods' `Ready` condition to False and leaves the rest of
the pod's status as the kubelet last wrote it: the containers still say running and ready. A
kubelet never writes that combination (it computes `Ready` from its containers), so it tells a
lost node from the pod alone, with no read of Node objects (no cluster-wide permission, no cost
that grows with the cluster's nodes). The condition's lastTransitionTime says since when.

After `runPolicy.nodeLostTimeoutSeconds` the operator deletes such a pod with no grace period,
as `kubectl delete pod --force` would: the StatefulSet makes it again on a node that answers.

A ReadWriteOnce checkpoint volume is the exception: it lives on (or is attached to) one node,
and a pod that mounts it cannot move. The scheduler then says only that the volume's node
affinity does not match (`VOLUME_CONFLICTS`); `claim_hint` says what it means for the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from tfjob_operator.api.spec import NODE_LOST_TIMEOUT_SECONDS, TFJobSpec
from tfjob_operator.rules import naming
from tfjob_operator.rules import status as st

REASON = "NodeLost"


def lost_since(pod: Mapping[str, Any], statuses: list[dict[str, Any]]) -> datetime | None:
    """When the node controller marked the pod not ready while its containers, as the kubelet
    last said, were running and ready; None for any other pod."""
    if not (pod.get("spec") or {}).get("nodeName") or not statuses:
        return None
    if not all(cs.get("ready") and "running" in (cs.get("state") or {}) for cs in statuses):
        return None
    for cond in (pod.get("status") or {}).get("conditions") or []:
        # The kubelet's own False always has a reason (ContainersNotReady, and
        # ReadinessGatesNotReady while a readiness gate holds ready containers back); the node
        # controller keeps the reason of the True it overwrites: none.
        if cond.get("type") == "Ready" and cond.get("status") == "False" and not cond.get("reason"):
            return st.parse_timestamp(cond.get("lastTransitionTime"))
    return None


def timeout(seconds: int | None) -> int:
    """The timeout in force: the spec's, or the default when it sets none."""
    return NODE_LOST_TIMEOUT_SECONDS if seconds is None else seconds


def deadline(since: datetime, seconds: int | None) -> datetime | None:
    """When a pod lost since `since` is deleted; None when the timeout is 0 (never)."""
    limit = timeout(seconds)
    return None if limit == 0 else since + timedelta(seconds=limit)


def message(node: str, since: datetime, seconds: int | None) -> str:
    """What `status.waiting` says of a pod on a lost node: the same at every reconcile."""
    marked = st.timestamp(since)
    head = f"node {node} stopped answering (its pods were marked not ready at {marked})"
    due = deadline(since, seconds)
    if due is None:
        return (
            f"{head}; runPolicy.nodeLostTimeoutSeconds is 0: the pod waits for the node to "
            "come back"
        )
    return (
        f"{head}; the operator deletes the pod at {st.timestamp(due)} "
        f"(runPolicy.nodeLostTimeoutSeconds {timeout(seconds)}) so that it starts on another node"
    )


# What the scheduler says of a pod whose volume is tied to nodes where it cannot run: "node(s)
# had volume node affinity conflict" up to 1.28 or so, "node(s) didn't match PersistentVolume's
# node affinity" in current releases (1.37 included).
VOLUME_CONFLICTS = (
    "volume node affinity conflict",
    "didn't match PersistentVolume's node affinity",
)


def volume_conflict(message: str) -> str | None:
    """The scheduler's words for a volume tied to other nodes, if its message has them."""
    return next((words for words in VOLUME_CONFLICTS if words in message), None)


def claim_hint(job: str, spec: TFJobSpec) -> str | None:
    """Why a pod that mounts the checkpoint claim may be held to one node, or None when the
    job has no checkpoint claim."""
    checkpoint = spec.checkpoint
    if checkpoint is None:
        return None
    if checkpoint.storage is None:
        return (
            f"the volume of checkpoint claim {checkpoint.claim_name} is tied to a node where the "
            "pod cannot run (ReadWriteOnce on a node that stopped answering?); a ReadWriteMany "
            "claim lets the pods move"
        )
    modes = set(checkpoint.storage.access_modes)
    claim = naming.checkpoint_claim_name(job)
    if "ReadWriteMany" in modes:
        return f"the volume of checkpoint claim {claim} is tied to nodes where the pod cannot run"
    return (
        f"checkpoint claim {claim} is ReadWriteOnce: its volume stays on one node, and a pod "
        "that mounts it starts only there once the node answers again; accessModes "
        "[ReadWriteMany] lets the pods move"
    )
