"""The Workload a queued job asks admission with, built from its spec and its rendered pod
templates; when the one Kueue holds no longer describes the job (`stale`); and what to do with
it (`WorkloadDecision`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfjob_operator.api.spec import ReplicaType, TFJobSpec
from tfjob_operator.rules import naming
from tfjob_operator.rules.kueue import (
    ADMISSION_HASH,
    GROUP,
    JOB_UID_LABEL,
    POD_PRIORITY_GROUP,
    PODSETS_HASH,
    podset_name,
    workload_name,
)
from tfjob_operator.rules.kueue.admission import WorkloadObservation
from tfjob_operator.rules.kueue.queue import Priority

Manifest = dict[str, Any]

# The pod spec fields Kueue's admission reads.
ADMISSION_FIELDS = (
    "nodeSelector",
    "tolerations",
    "affinity",
    "priorityClassName",
    "runtimeClassName",
    "overhead",
)


def podsets(spec: TFJobSpec, templates: Mapping[ReplicaType, dict[str, Any]]) -> list[Manifest]:
    """One podSet per replica type: its pod count and its pod template as the operator renders
    it (before admission places it), which Kueue reads the requests from. A podSet template
    holds only labels and annotations in its metadata."""
    return [
        {
            "name": podset_name(rt),
            "count": rs.replicas,
            "template": {
                "metadata": {
                    k: v
                    for k, v in (templates[rt].get("metadata") or {}).items()
                    if k in ("labels", "annotations")
                },
                "spec": templates[rt]["spec"],
            },
        }
        for rt, rs in spec.replicas().items()
    ]


def workload(
    job: Any,
    version: str,
    queue: str,
    sets: list[dict[str, Any]],
    priority: Priority | None,
) -> Manifest:
    """The job's Workload; `job` is the owning JobRef, `sets` its `podsets`."""
    body: dict[str, Any] = {"queueName": queue, "podSets": sets}
    if priority is not None:
        if version == "v1beta1":
            body["priorityClassName"] = priority.name
            body["priorityClassSource"] = (
                "scheduling.k8s.io/priorityclass"
                if priority.group == POD_PRIORITY_GROUP
                else "kueue.x-k8s.io/workloadpriorityclass"
            )
        else:
            body["priorityClassRef"] = {
                "group": priority.group,
                "kind": priority.kind,
                "name": priority.name,
            }
        body["priority"] = priority.value
    labels = naming.child_labels(job.name)
    labels[JOB_UID_LABEL] = job.uid
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job.name, job.uid),
            "namespace": job.namespace,
            "labels": labels,
            "annotations": {
                PODSETS_HASH: _digest(body),
                ADMISSION_HASH: admission_hash(body),
            },
            "ownerReferences": [job.owner_reference()],
        },
        "spec": body,
    }


def _digest(obj: Any) -> str:
    """A short hash of JSON-able data (PODSETS_HASH: the Workload's whole spec as written)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def admission_hash(spec: Mapping[str, Any]) -> str:
    """A hash of what admission decides on: each podSet's count, its containers' resources and
    the pod fields that choose a flavor, and the priority."""
    what = {
        "priority": [spec.get(k) for k in ("priority", "priorityClassRef", "priorityClassName")],
        "queue": spec.get("queueName"),
        "podSets": [
            {
                "name": p["name"],
                "count": p["count"],
                "resources": [
                    (c.get("name"), c.get("resources"))
                    for kind in ("initContainers", "containers")
                    for c in p["template"]["spec"].get(kind) or []
                ],
                **{k: p["template"]["spec"].get(k) for k in ADMISSION_FIELDS},
            }
            for p in spec.get("podSets") or []
        ],
    }
    return _digest(what)


def stale(observed: WorkloadObservation, wanted: Manifest) -> bool:
    """Whether the job's Workload no longer describes it: any change while it waits; while it
    holds quota, only a change of what admission decided on."""
    notes: dict[str, str] = wanted["metadata"]["annotations"]
    if observed.reserved:
        return observed.admission_hash != notes[ADMISSION_HASH]
    return observed.podsets_hash != notes[PODSETS_HASH]


@dataclass
class WorkloadDecision:
    """What to do with the job's Workload: create it (after deleting a stale one), or write
    its status (a merge patch that names the resourceVersion it was computed from)."""

    create: Manifest | None = None
    delete: str | None = None
    status_patch: dict[str, Any] = field(default_factory=dict)
