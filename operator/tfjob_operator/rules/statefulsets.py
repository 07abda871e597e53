"""What the operator reads from the StatefulSets it owns.

Enough to make them converge on the spec (a removed replica type's StatefulSet and Service go,
a finished job's StatefulSets scale to 0), to see when a StatefulSet cannot make its pods, and
which pods a new template has left behind (`lifecycle.restart`). A replica type's Service has
its StatefulSet's name, so StatefulSets alone tell what exists. What moves in a job's steady
state (ready and current counts) is not kept: its events change no observation.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from tfjob_operator.rules import kueue, lineage, naming
from tfjob_operator.rules.pods import PodObservation


@dataclass(frozen=True)
class StatefulSetObservation:
    name: str
    uid: str
    replicas: int = 0  # spec.replicas
    # What shows that Kueue's StatefulSet integration took it (`kueue.statefulset_takeover`).
    kueue_takeover: str = ""
    # metadata.generation; the generation Kubernetes' StatefulSet controller has seen
    # (status.observedGeneration), and the template revision it gives new pods
    # (status.updateRevision), which is the current one once the two generations are equal.
    generation: int = 0
    observed_generation: int = 0
    update_revision: str = ""
    # The hash of the StatefulSet as the operator last applied it (`children.built_hash`).
    built: str = ""
    # Its pod template's `children.spec_hash`: a pod with another one rolls.
    spec_hash: str = ""
    # The uid of the TFJob that controls it (`lineage`).
    owner: str = ""
    # Being deleted (its job deleted, the garbage collector at work).
    deleting: bool = False

    @property
    def settled(self) -> bool:
        """Whether Kubernetes' StatefulSet controller has seen its newest spec."""
        return self.observed_generation == self.generation


def observe_statefulset(body: dict[str, Any]) -> StatefulSetObservation | None:
    """Reduce an owned StatefulSet to what convergence needs; None for what is not ours."""
    meta = body.get("metadata") or {}
    if (meta.get("labels") or {}).get(naming.LABEL_MANAGED_BY) != naming.MANAGED_BY:
        return None
    spec = body.get("spec") or {}
    template_meta = (spec.get("template") or {}).get("metadata") or {}
    status = body.get("status") or {}
    return StatefulSetObservation(
        meta.get("name", ""),
        meta.get("uid", ""),
        int(spec.get("replicas") or 0),
        kueue.statefulset_takeover(body),
        generation=int(meta.get("generation") or 0),
        observed_generation=int(status.get("observedGeneration") or 0),
        update_revision=status.get("updateRevision") or "",
        built=(meta.get("annotations") or {}).get(naming.ANNOTATION_BUILT, ""),
        spec_hash=(template_meta.get("annotations") or {}).get(naming.ANNOTATION_SPEC_HASH, ""),
        owner=lineage.controller_uid(meta),
        deleting=meta.get("deletionTimestamp") is not None,
    )


def lacking(
    job: str, sets: list[StatefulSetObservation], pods: list[PodObservation]
) -> list[StatefulSetObservation]:
    """StatefulSets with fewer pods than they should have (a moment at start, or for good
    when Kubernetes refuses to create them)."""
    have = Counter(naming.replica_name(job, p.replica_type) for p in pods)
    return [s for s in sets if have[s.name] < s.replicas]
