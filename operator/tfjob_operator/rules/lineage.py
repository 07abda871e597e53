"""Which of the children seen under a job's name are that job's own.

A TFJob deleted and made again under the same name (`kubectl delete -f job.yaml && kubectl
apply -f job.yaml`) finds the first one's StatefulSets and pods still there for a while: the
garbage collector deletes them in the background, and a pod keeps its grace period. They carry
the same names and labels, so by those alone the new job would read the old one's exits as its
own, and end Succeeded (or Failed) before it ran. What tells them apart is the owner chain: a
StatefulSet is owned by its TFJob, a pod by its StatefulSet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar


class Child(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def owner(self) -> str: ...


S = TypeVar("S", bound=Child)
P = TypeVar("P", bound=Child)


def controller_uid(meta: Mapping[str, Any]) -> str:
    """The uid of the object's controlling owner ("" for none)."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid", ""))
    return ""


@dataclass(frozen=True)
class Lineage(Generic[S, P]):
    """The job's own StatefulSets and pods, and the names of an earlier job's StatefulSets
    still there (applying over one would make it the new job's, with the old pods in it)."""

    sets: list[S]
    pods: list[P]
    earlier_sets: list[str]


def own(job_uid: str, sets: Sequence[S], pods: Sequence[P]) -> Lineage[S, P]:
    """Split what is seen under the job's name: a StatefulSet is the job's when the job
    controls it; a pod, when one of the job's StatefulSets does. A pod whose StatefulSet is
    not seen yet waits for it, as one of the earlier job's does for good. A child with no
    controlling owner (orphaned on purpose, `kubectl delete --cascade=orphan`) is no job's:
    adopted, its pods' exits would decide the new job (an old chief's exit 0, a success at
    once)."""
    mine = [s for s in sets if s.owner == job_uid]
    earlier = sorted(s.name for s in sets if s.owner != job_uid)
    set_uids = {s.uid for s in mine}
    # A pod of no StatefulSet: the job's StatefulSet controller adopts it, as Kubernetes' does.
    pods_kept = [p for p in pods if p.owner == "" or p.owner in set_uids]
    return Lineage(mine, pods_kept, earlier)
