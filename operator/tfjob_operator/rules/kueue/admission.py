"""What Kueue's admission says, read back from the Workload: its conditions, the flavors each
podSet was admitted on, the admission checks' pod set updates; and where that places each
replica type's pods (`placements`, `place`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfjob_operator.api.spec import ReplicaType
from tfjob_operator.rules.kueue import ADMISSION_HASH, PODSETS_HASH, podset_name


@dataclass(frozen=True)
class Placement:
    """What admission gives one replica type's pods: the flavors' node labels and tolerations,
    and the admission checks' pod set updates."""

    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[str, ...] = ()  # each as sorted JSON, so that the value is hashable
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()


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
class Condition:
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

    def condition(self, type_: str) -> Condition | None:
        for raw in self.conditions:
            c = json.loads(raw)
            if c.get("type") == type_:
                return Condition(
                    type_, c.get("status", ""), c.get("reason", ""), c.get("message", "")
                )
        return None

    def is_true(self, type_: str) -> bool:
        c = self.condition(type_)
        return c is not None and c.status == "True"

    @property
    def evicted(self) -> Condition | None:
        c = self.condition("Evicted")
        return c if c is not None and c.status == "True" else None

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
        name=meta.get("name", ""),
        resource_version=meta.get("resourceVersion", ""),
        podsets_hash=(meta.get("annotations") or {}).get(PODSETS_HASH, ""),
        admission_hash=(meta.get("annotations") or {}).get(ADMISSION_HASH, ""),
        conditions=tuple(json.dumps(c, sort_keys=True) for c in status.get("conditions") or []),
        cluster_queue=admission.get("clusterQueue", ""),
        flavors=flavors,
        has_admission=bool(admission),
        updates=tuple(sorted(updates.items())),
        checks_pending=tuple(sorted(pending)),
    )


def placements(
    observed: WorkloadObservation, flavors: Mapping[str, Flavor]
) -> dict[ReplicaType, Placement] | None:
    """Each replica type's placement from the admission; None while a flavor is unread."""
    updates = dict(observed.updates)
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
        result[rt] = Placement(
            tuple(sorted(node.items())),
            tuple(tolerations),
            tuple(sorted(dict(update.labels).items())),
            tuple(sorted(dict(update.annotations).items())),
        )
    return result
