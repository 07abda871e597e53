"""What the operator keeps of the TFJobs it watches between events.

Memory follows what the rules read: a TFJob is kept as its identity, spec and status (no
`managedFields`, no annotations such as kubectl's last-applied copy of the whole spec); pods
and StatefulSets are kept as observations (`pods.observe`, `statefulsets.observe_statefulset`) by
their watches (`childwatch.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
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
