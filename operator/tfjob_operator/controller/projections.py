"""What the operator keeps of the TFJobs it watches between events.

Memory follows what the rules read: a TFJob is kept as its identity, spec and status (no
`managedFields`, no annotations such as kubectl's last-applied copy of the whole spec, but
MultiKueue's naming its Workload); pods
and StatefulSets are kept as observations (`pods.observe`, `statefulsets.observe_statefulset`) by
their watches (`childwatch.py`).

A finished job is read only when something about it changes, so its spec and status are kept
packed (compressed JSON) beside its identity: memory follows the jobs that run, not every job
that ever ran. `unpacked` gives the record back whole, as the rules read it.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any

from tfjob_operator.rules import kueue
from tfjob_operator.rules import status as st
from tfjob_operator.rules.kueue import multikueue

# Metadata the reconciler and the rules read of a TFJob (and kopf needs to post its Events).
JOB_METADATA = ("name", "namespace", "uid", "generation", "resourceVersion", "deletionTimestamp")
# Labels the rules read: Kueue's queue and priority class; and where MultiKueue copied the job
# here, the Workload it made for it (a label before Kueue v0.18, an annotation since).
JOB_LABELS = (kueue.QUEUE_LABEL, kueue.PRIORITY_LABEL, multikueue.PREBUILT_WORKLOAD)
JOB_ANNOTATIONS = (multikueue.PREBUILT_WORKLOAD,)


PACKED = "packed"  # the key of a finished job's packed spec and status


def job_record(body: Mapping[str, Any]) -> dict[str, Any]:
    """A TFJob as the operator keeps it: shares the spec and status of `body` (the raw body of
    a watch event is not changed afterwards), copies nothing else."""
    meta = body.get("metadata") or {}
    kept = {k: meta[k] for k in JOB_METADATA if k in meta}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k in JOB_LABELS}
    if labels:
        kept["labels"] = labels
    notes = {k: v for k, v in (meta.get("annotations") or {}).items() if k in JOB_ANNOTATIONS}
    if notes:
        kept["annotations"] = notes
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": kept,
        "spec": body.get("spec"),
        "status": body.get("status"),
    }


def index_record(body: Mapping[str, Any]) -> dict[str, Any]:
    """A TFJob as the index keeps it between events: its `job_record`, with the spec and
    status of a finished job packed (`unpacked` gives them back)."""
    record = job_record(body)
    if not st.is_finished(record["status"] or {}):
        return record
    packed = json.dumps([record.pop("spec"), record.pop("status")], separators=(",", ":"))
    record[PACKED] = zlib.compress(packed.encode())
    return record


def unpacked(record: dict[str, Any]) -> dict[str, Any]:
    """An `index_record` with its spec and status as dicts (a finished job's unpacked: new
    dicts each time, which the caller may keep)."""
    if PACKED not in record:
        return record
    spec, status = json.loads(zlib.decompress(record[PACKED]))
    whole = {k: v for k, v in record.items() if k != PACKED}
    whole["spec"], whole["status"] = spec, status
    return whole
