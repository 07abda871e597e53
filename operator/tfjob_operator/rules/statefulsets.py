"""What the operator reads from the StatefulSets it owns.

Enough to make them converge on the spec (a removed replica type's StatefulSet and Service go,
a finished job's StatefulSets scale to 0) and to see when a StatefulSet cannot make its pods.
A replica type's Service has its StatefulSet's name, so StatefulSets alone tell what exists.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from tfjob_operator.rules import kueue, naming
from tfjob_operator.rules.pods import PodObservation


@dataclass(frozen=True)
class StatefulSetObservation:
    name: str
    uid: str
    replicas: int = 0  # spec.replicas
    # What shows that Kueue's StatefulSet integration took it (`kueue.statefulset_takeover`).
    kueue_takeover: str = ""


def observe_statefulset(body: dict[str, Any]) -> StatefulSetObservation | None:
    """Reduce an owned StatefulSet to what convergence needs; None for what is not ours."""
    meta = body.get("metadata") or {}
    if (meta.get("labels") or {}).get(naming.LABEL_MANAGED_BY) != naming.MANAGED_BY:
        return None
    replicas = (body.get("spec") or {}).get("replicas")
    return StatefulSetObservation(
        meta.get("name", ""),
        meta.get("uid", ""),
        int(replicas or 0),
        kueue.statefulset_takeover(body),
    )


def lacking(
    job: str, sets: list[StatefulSetObservation], pods: list[PodObservation]
) -> list[StatefulSetObservation]:
    """StatefulSets with fewer pods than they should have (a moment at start, or for good
    when Kubernetes refuses to create them)."""
    have = Counter(naming.replica_name(job, p.replica_type) for p in pods)
    return [s for s in sets if have[s.name] < s.replicas]
