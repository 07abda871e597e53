"""What the operator keeps of the objects it watches between events, and which events of
children are worth a reconcile.

Memory follows what the rules read: a TFJob is kept as its identity, spec and status (no
`managedFields`, no annotations such as kubectl's last-applied copy of the whole spec); pods
and StatefulSets are kept as observations (`pods.observe`, `owned.observe_statefulset`).
A child's event wakes its job only when its observation changed: a pod's conditions, IPs or
resourceVersion moving on alone change nothing the rules read.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from tfjob_operator.rules import kueue

# Metadata the reconciler and the rules read of a TFJob (and kopf needs to post its Events).
JOB_METADATA = ("name", "namespace", "uid", "generation", "resourceVersion", "deletionTimestamp")
# Labels the rules read: Kueue's queue and priority class.
JOB_LABELS = (kueue.QUEUE_LABEL, kueue.PRIORITY_LABEL)


def job_record(body: Mapping[str, Any]) -> dict[str, Any]:
    """A TFJob as the operator keeps it: shares the spec and status of `body`, copies nothing
    else (the raw body of a watch event is not changed afterwards)."""
    meta = body.get("metadata") or {}
    kept = {k: meta[k] for k in JOB_METADATA if k in meta}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k in JOB_LABELS}
    if labels:
        kept["labels"] = labels
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": kept,
        "spec": body.get("spec"),
        "status": body.get("status"),
    }


class ChildChanges:
    """The last observation of each child, by uid: an event whose observation equals the last
    one changes no decision. Holds the same observation objects as the indexes."""

    def __init__(self) -> None:
        self._seen: dict[str, Hashable] = {}

    def __len__(self) -> int:
        return len(self._seen)

    def changed(self, uid: str, observation: Hashable | None, deleted: bool = False) -> bool:
        """Whether this event of a child may change its job's decision.

        A deletion always may (a child to make again, a pod gone); a child the rules do not
        read (`observation` None: Services, claims) otherwise never does.
        """
        if deleted:
            self._seen.pop(uid, None)
            return True
        if observation is None:
            return False
        if self._seen.get(uid) == observation:
            return False
        self._seen[uid] = observation
        return True
