"""What Kueue's admission says, read back from the Workload: its conditions, the flavors each
podSet was admitted on, the admission checks' pod set updates; and where that places each
replica type's pods (`placements`, `place`), with what topology-aware scheduling adds; and
the topologyRequest a podSet asks with (`topology_request`), read from its pod template as
Kueue's jobframework reads it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfjob_operator.api.spec import ReplicaType
from tfjob_operator.rules.kueue import (
    ADMISSION_HASH,
    DEACTIVATED_BY_SUSPEND,
    POD_INDEX_LABEL,
    PODSET_GROUP_NAME,
    PODSET_LABEL,
    PODSETS_HASH,
    PREFERRED_TOPOLOGY,
    PRIORITY_FIELDS,
    PRIORITY_SOURCES,
    REQUIRED_TOPOLOGY,
    SLICE_CONSTRAINTS,
    SLICE_REQUIRED_TOPOLOGY,
    SLICE_SIZE,
    TOPOLOGY_GATE,
    UNCONSTRAINED_TOPOLOGY,
    WORKLOAD_ANNOTATION,
    podset_name,
)

# Kueue's reasons (or their prefix, before a cause) on the Evicted condition of a Workload
# whose spec.active went false: kueue.WorkloadDeactivated, and older Kueue's
# WorkloadEvictedByDeactivation.
DEACTIVATED = ("Deactivated", "InactiveWorkload")
# strconv.ParseBool's spellings, which Kueue reads the unconstrained annotation with.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def topology_request(annotations: Mapping[str, str]) -> dict[str, Any]:
    """A podSet's topologyRequest from its pod template's annotations, as jobframework's
    `NewPodSetTopologyRequest(...).PodIndexLabel(...).Build()` makes it for a StatefulSet's
    pods: required, else preferred, else unconstrained; the slice layers; the group name with
    required or preferred; and always the pod index label, so that Kueue ranks the pods by it
    (with no annotation the request is that label alone, as Kueue's). A value Kueue would
    refuse (not a bool, not a number, not a JSON list of 1 to 3) is left out."""
    request: dict[str, Any] = {}
    if REQUIRED_TOPOLOGY in annotations:
        request["required"] = annotations[REQUIRED_TOPOLOGY]
    elif PREFERRED_TOPOLOGY in annotations:
        request["preferred"] = annotations[PREFERRED_TOPOLOGY]
    elif annotations.get(UNCONSTRAINED_TOPOLOGY) in _TRUE | _FALSE:
        request["unconstrained"] = annotations[UNCONSTRAINED_TOPOLOGY] in _TRUE
    constraints = _slice_constraints(annotations.get(SLICE_CONSTRAINTS))
    if constraints is not None:
        request["podsetSliceRequiredTopologyConstraints"] = constraints
    elif SLICE_REQUIRED_TOPOLOGY in annotations and annotations.get(SLICE_SIZE, "").isdigit():
        request["podSetSliceRequiredTopology"] = annotations[SLICE_REQUIRED_TOPOLOGY]
        request["podSetSliceSize"] = int(annotations[SLICE_SIZE])
    request["podIndexLabel"] = POD_INDEX_LABEL
    if PODSET_GROUP_NAME in annotations and ("required" in request or "preferred" in request):
        request["podSetGroupName"] = annotations[PODSET_GROUP_NAME]
    return request


def _slice_constraints(raw: str | None) -> list[Any] | None:
    """The multi-layer slice constraints (TASMultiLayerTopology, on by default since Kueue
    0.19): a JSON list of 1 to 3 {topology, size}."""
    if raw is None:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    return parsed if isinstance(parsed, list) and 1 <= len(parsed) <= 3 else None


@dataclass(frozen=True)
class Placement:
    """What admission gives one replica type's pods: the flavors' node labels and tolerations,
    and the admission checks' pod set updates."""

    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[str, ...] = ()  # each as sorted JSON, so that the value is hashable
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    scheduling_gates: tuple[str, ...] = ()


def place(template: dict[str, Any], placement: Placement) -> None:
    """Give a pod template (already our own copy) what admission assigned to it."""
    meta = template.setdefault("metadata", {})
    if placement.labels:
        meta["labels"] = {**(meta.get("labels") or {}), **dict(placement.labels)}
    if placement.annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), **dict(placement.annotations)}
    spec = template["spec"]
    if placement.node_selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **dict(placement.node_selector)}
    if placement.tolerations:
        have = list(spec.get("tolerations") or [])
        for raw in placement.tolerations:
            toleration = json.loads(raw)
            if toleration not in have:
                have.append(toleration)
        spec["tolerations"] = have
    if placement.scheduling_gates:
        gates = list(spec.get("schedulingGates") or [])
        for gate in placement.scheduling_gates:
            if {"name": gate} not in gates:
                gates.append({"name": gate})
        spec["schedulingGates"] = gates


@dataclass(frozen=True)
class Flavor:
    """What the operator reads of a ResourceFlavor: the node labels and tolerations it gives."""

    node_labels: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[str, ...] = ()

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Flavor:
        spec = body.get("spec") or {}
        return cls(
            tuple(sorted((spec.get("nodeLabels") or {}).items())),
            tuple(json.dumps(t, sort_keys=True) for t in spec.get("tolerations") or []),
        )


@dataclass(frozen=True)
class WorkloadCondition:
    type: str
    status: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class WorkloadObservation:
    """What the operator reads of its Workload. `conditions` keeps them whole (as JSON), since
    a status write sends the list back with ours changed."""

    name: str
    resource_version: str
    podsets_hash: str
    admission_hash: str = ""
    conditions: tuple[str, ...] = ()
    cluster_queue: str = ""
    # podSet name -> ((resource, flavor), ...), from status.admission
    flavors: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    has_admission: bool = False
    # podSet name -> the Ready admission checks' updates for it, merged (as a Placement)
    updates: tuple[tuple[str, Placement], ...] = ()
    checks_pending: tuple[str, ...] = ()
    # podSet name -> whether its topologyRequest names a level (required, preferred or
    # unconstrained), for each podSet admitted with a topologyAssignment (TAS)
    topology: tuple[tuple[str, bool], ...] = ()
    # spec.active, and whether the operator made it false for a suspended job
    active: bool = True
    deactivated_by_suspend: bool = False
    # The class that sets spec.priority, (group, name), and the value Kueue keeps there
    priority_class: tuple[str, str] | None = None
    priority: int | None = None
    # The spec's priority fields as stored (JSON): a hash written before they left the hashes
    # is compared with them put back.
    priority_fields: str = "{}"
    # The uid of the object that controls it ("" for none: a Workload Kueue's MultiKueue made
    # on a worker cluster, until the job it was made for takes it)
    controller_uid: str = ""

    def condition(self, type_: str) -> WorkloadCondition | None:
        for raw in self.conditions:
            c = json.loads(raw)
            if c.get("type") == type_:
                return WorkloadCondition(
                    type_, c.get("status", ""), c.get("reason", ""), c.get("message", "")
                )
        return None

    def is_true(self, type_: str) -> bool:
        c = self.condition(type_)
        return c is not None and c.status == "True"

    @property
    def evicted(self) -> WorkloadCondition | None:
        c = self.condition("Evicted")
        return c if c is not None and c.status == "True" else None

    @property
    def eviction(self) -> WorkloadCondition | None:
        """The Evicted condition when it is Kueue's hold on the job (a preemption, a timeout,
        an admin's or Kueue's own deactivation). Not the deactivation the operator asked for
        because the user suspended the job: that job waits for its user, not for Kueue. Nor a
        deactivation that is over (the Workload is active again): the job is queued. Kueue
        keeps the condition True until it admits the Workload again."""
        c = self.evicted
        if c is None or not c.reason.startswith(DEACTIVATED):
            return c
        return None if self.deactivated_by_suspend or self.active else c

    @property
    def admitted(self) -> bool:
        """Admitted and not being evicted: the job may run."""
        return self.is_true("Admitted") and self.evicted is None and self.has_admission

    @property
    def reserved(self) -> bool:
        return self.is_true("QuotaReserved") or self.has_admission

    @property
    def finished(self) -> bool:
        return self.is_true("Finished")

    def flavor_names(self) -> set[str]:
        return {flavor for _, assigned in self.flavors for _, flavor in assigned}


def observe_workload(body: Mapping[str, Any]) -> WorkloadObservation:
    """Reduce a Workload to what the rules read."""
    meta = body.get("metadata") or {}
    notes = meta.get("annotations") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    admission = status.get("admission") or {}
    flavors = tuple(
        sorted(
            (a.get("name", ""), tuple(sorted((a.get("flavors") or {}).items())))
            for a in admission.get("podSetAssignments") or []
        )
    )
    updates: dict[str, Placement] = {}
    pending: list[str] = []
    for check in status.get("admissionChecks") or []:
        if check.get("state") != "Ready":
            pending.append(check.get("name", ""))
            continue
        for u in check.get("podSetUpdates") or []:
            prior = updates.get(u.get("name", ""), Placement())
            updates[u.get("name", "")] = Placement(
                prior.node_selector + tuple(sorted((u.get("nodeSelector") or {}).items())),
                prior.tolerations
                + tuple(json.dumps(t, sort_keys=True) for t in u.get("tolerations") or []),
                prior.labels + tuple(sorted((u.get("labels") or {}).items())),
                prior.annotations + tuple(sorted((u.get("annotations") or {}).items())),
            )
    return WorkloadObservation(
        topology=_topology(spec, admission),
        name=meta.get("name", ""),
        resource_version=meta.get("resourceVersion", ""),
        podsets_hash=notes.get(PODSETS_HASH, ""),
        admission_hash=notes.get(ADMISSION_HASH, ""),
        conditions=tuple(json.dumps(c, sort_keys=True) for c in status.get("conditions") or []),
        cluster_queue=admission.get("clusterQueue", ""),
        flavors=flavors,
        has_admission=bool(admission),
        updates=tuple(sorted(updates.items())),
        checks_pending=tuple(sorted(pending)),
        active=spec.get("active") is not False,
        deactivated_by_suspend=DEACTIVATED_BY_SUSPEND in notes,
        priority_class=priority_class_of(spec),
        priority=spec.get("priority"),
        priority_fields=json.dumps(
            {k: spec[k] for k in PRIORITY_FIELDS if k in spec}, sort_keys=True
        ),
        controller_uid=next(
            (
                o.get("uid", "")
                for o in meta.get("ownerReferences") or []
                if isinstance(o, dict) and o.get("controller")
            ),
            "",
        ),
    )


def _topology(
    spec: Mapping[str, Any], admission: Mapping[str, Any]
) -> tuple[tuple[str, bool], ...]:
    """`WorkloadObservation.topology`: the podSets admitted with a topologyAssignment."""
    requests = {
        p.get("name", ""): p.get("topologyRequest") or {} for p in spec.get("podSets") or []
    }
    levels = ("required", "preferred", "unconstrained")
    return tuple(
        sorted(
            (a.get("name", ""), any(k in requests.get(a.get("name", ""), {}) for k in levels))
            for a in admission.get("podSetAssignments") or []
            if a.get("topologyAssignment")
        )
    )


def priority_class_of(spec: Mapping[str, Any]) -> tuple[str, str] | None:
    """(group, name) of the class a Workload spec names (v1beta2 or v1beta1); None for none."""
    ref = spec.get("priorityClassRef")
    if ref:
        return ref.get("group", ""), ref.get("name", "")
    if spec.get("priorityClassName"):
        source = PRIORITY_SOURCES.get(spec.get("priorityClassSource", ""), "")
        return source, spec["priorityClassName"]
    return None


def placements(
    observed: WorkloadObservation, flavors: Mapping[str, Flavor]
) -> dict[ReplicaType, Placement] | None:
    """Each replica type's placement from the admission; None while a flavor is unread."""
    updates, topology = dict(observed.updates), dict(observed.topology)
    result: dict[ReplicaType, Placement] = {}
    for rt in ReplicaType:
        name = podset_name(rt)
        assigned = dict(observed.flavors).get(name, ())
        node: dict[str, str] = {}
        tolerations: list[str] = []
        for _, flavor_name in assigned:
            flavor = flavors.get(flavor_name)
            if flavor is None:
                return None
            node.update(flavor.node_labels)
            tolerations += [t for t in flavor.tolerations if t not in tolerations]
        update = updates.get(name, Placement())
        node.update(update.node_selector)
        tolerations += [t for t in update.tolerations if t not in tolerations]
        labels, annotations = dict(update.labels), dict(update.annotations)
        gates: tuple[str, ...] = ()
        if name in topology:
            labels, annotations, gates = _topology_marks(
                labels, annotations, name, observed.name, topology[name]
            )
        result[rt] = Placement(
            tuple(sorted(node.items())),
            tuple(tolerations),
            tuple(sorted(labels.items())),
            tuple(sorted(annotations.items())),
            gates,
        )
    return result


def _topology_marks(
    labels: dict[str, str], annotations: dict[str, str], podset: str, workload: str, explicit: bool
) -> tuple[dict[str, str], dict[str, str], tuple[str, ...]]:
    """What a podSet admitted with a topologyAssignment gives its pods, as jobframework's
    `podset.FromAssignment` and `getPodSetsInfoFromStatus` do: the podset label and workload
    annotation the TopologyUngater finds them by, the unconstrained annotation for a podSet
    that asked for no level (implicit TAS: without a topology annotation the ungater skips a
    pod), and the topology gate it lifts once it picks each pod's domain. The gate is Kueue's
    to lift: the operator never does."""
    annotations = {**annotations, WORKLOAD_ANNOTATION: workload}
    if not explicit:
        annotations[UNCONSTRAINED_TOPOLOGY] = "true"
    return {**labels, PODSET_LABEL: podset}, annotations, (TOPOLOGY_GATE,)
