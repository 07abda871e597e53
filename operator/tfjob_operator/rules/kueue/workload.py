"""The Workload a queued job asks admission with, built from its spec and its rendered pod
templates; when the one Kueue holds no longer describes the job (`stale`); and what to do with
it (`WorkloadDecision`): updated in place while it holds no quota, replaced only when what
admission decided on changed."""

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
    DEACTIVATED_BY_SUSPEND,
    GROUP,
    JOB_UID_LABEL,
    POD_PRIORITY_GROUP,
    PODSETS_HASH,
    PRIORITY_FIELDS,
    podset_name,
    workload_name,
)
from tfjob_operator.rules.kueue.admission import (
    WorkloadObservation,
    priority_class_of,
    topology_request,
)
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
    holds only labels and annotations in its metadata. Its topologyRequest comes from the
    template's annotations (`topology_request`), as Kueue's own integrations make it."""
    return [
        {
            "name": podset_name(rt),
            "count": rs.replicas,
            "topologyRequest": topology_request(
                (templates[rt].get("metadata") or {}).get("annotations") or {}
            ),
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
    active: bool = True,
) -> Manifest:
    """The job's Workload; `job` is the owning JobRef, `sets` its `podsets`. A suspended job's
    is inactive (`active`), as `kueuectl stop workload` leaves one: Kueue admits it not."""
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
    notes = {PODSETS_HASH: podsets_hash(body), ADMISSION_HASH: admission_hash(body)}
    if not active:
        body["active"] = False
        notes[DEACTIVATED_BY_SUSPEND] = "true"
    labels = naming.child_labels(job.name)
    labels[JOB_UID_LABEL] = job.uid
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job.name, job.uid),
            "namespace": job.namespace,
            "labels": labels,
            "annotations": notes,
            "ownerReferences": [job.owner_reference()],
        },
        "spec": body,
    }


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _shape(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec without what changes in place whatever the Workload's state: its priority and
    `active`."""
    return {k: v for k, v in spec.items() if k not in (*PRIORITY_FIELDS, "active")}


def podsets_hash(spec: Mapping[str, Any]) -> str:
    """PODSETS_HASH: the Workload's spec as written, but for its priority and `active`."""
    return _digest(_shape(spec))


def admission_hash(spec: Mapping[str, Any], priority: Mapping[str, Any] | None = None) -> str:
    """ADMISSION_HASH: each podSet's count, its containers' resources and the pod fields that
    choose a flavor, and the queue. `priority` (the spec's priority fields) gives the hash as
    an operator that still counted the priority in wrote it."""
    what: dict[str, Any] = {
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
    if priority is not None:
        what["priority"] = [priority.get(k) for k in PRIORITY_FIELDS[:3]]
    return _digest(what)


def stale(observed: WorkloadObservation, wanted: Manifest) -> bool:
    """Whether the job's Workload no longer describes it: any change while it waits (then it
    is updated in place); while it holds quota, only a change of what admission decided on
    (then it is replaced). Never its priority, nor `active`. A hash an older operator wrote
    (with the priority in) still matches, so that an upgrade restarts no job."""
    spec = wanted["spec"]
    old = {**_shape(spec), **json.loads(observed.priority_fields)}
    if observed.reserved:
        return observed.admission_hash not in (admission_hash(spec), admission_hash(old, old))
    return observed.podsets_hash not in (podsets_hash(spec), _digest(old))


def _priority_fields(wanted: Manifest) -> tuple[str, ...]:
    if wanted["apiVersion"].endswith("/v1beta1"):
        return ("priority", "priorityClassName", "priorityClassSource")
    return ("priority", "priorityClassRef")


def priority_update(observed: WorkloadObservation, wanted: Manifest) -> dict[str, Any]:
    """The priority fields to set in place, as Kueue's jobframework sets them
    (UpdateWorkloadPriority): only for a Workload whose WorkloadPriorityClass (or lack of one)
    is no longer the job's label's. A new value of the same class is Kueue's to write (its
    WorkloadPriorityClass controller does), and a PriorityClass-backed Workload keeps its own.
    While it holds quota a Workload without a class gets none, nor one of another group (the
    API refuses both)."""
    spec = wanted["spec"]
    have, want = observed.priority_class, priority_class_of(spec)
    if have is not None and have[0] != GROUP:
        return {}
    if observed.reserved and (have is None or want is None or want[0] != GROUP):
        return {}
    label = want[1] if want is not None and want[0] == GROUP else ""
    if (have[1] if have is not None else "") == label:
        return {}
    return {k: spec.get(k) for k in _priority_fields(wanted)}


def workload_update(
    observed: WorkloadObservation, wanted: Manifest, suspend: bool
) -> dict[str, Any]:
    """The merge patch that brings the job's Workload up to date in place (it names the
    resourceVersion it was computed from); {} when none is due. A Workload that holds no quota
    takes the whole new spec, and keeps its place in the queue (Kueue updates its own so);
    one that does takes only a new priority class. `active` follows runPolicy.suspend."""
    spec: dict[str, Any] = {}
    notes: dict[str, Any] = {}
    if not observed.reserved and stale(observed, wanted):
        spec = {k: v for k, v in wanted["spec"].items() if k != "active"}
        spec.update({k: None for k in _priority_fields(wanted) if k not in spec})
        if observed.priority is not None and observed.priority_class == priority_class_of(spec):
            spec["priority"] = observed.priority  # Kueue keeps a class' value current
        notes = {k: wanted["metadata"]["annotations"][k] for k in (PODSETS_HASH, ADMISSION_HASH)}
    else:
        spec = priority_update(observed, wanted)
    if suspend and observed.active:
        spec["active"] = False
        notes[DEACTIVATED_BY_SUSPEND] = "true"
    elif not suspend and observed.deactivated_by_suspend:
        if not observed.active:
            spec["active"] = True
        notes[DEACTIVATED_BY_SUSPEND] = None
    if not spec and not notes:
        return {}
    meta: dict[str, Any] = {"resourceVersion": observed.resource_version}
    if notes:
        meta["annotations"] = notes
    return {"metadata": meta, **({"spec": spec} if spec else {})}


@dataclass
class WorkloadDecision:
    """What to do with the job's Workload: create it (after deleting a stale one), update it
    in place (`update`, a merge patch of its metadata and spec), or write its status (a merge
    patch); each patch names the resourceVersion it was computed from."""

    create: Manifest | None = None
    delete: str | None = None
    update: dict[str, Any] = field(default_factory=dict)
    status_patch: dict[str, Any] = field(default_factory=dict)
