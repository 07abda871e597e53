"""A new pod template reaches every task of a job at once: which pods to delete, and when.

The StatefulSets are `OnDelete` (`children.statefulset`): a new template (a resize changes
TF_CONFIG in every replica type; a new image, a new env) reaches a pod only once the pod is
deleted. Kubernetes' rolling update would replace the pods one at a time, each replica type on
its own: the job would run a mix of old and new clusters, and a parameter-server chief would
connect to parameter servers that then restart, and fail. The operator deletes every pod of an
old revision, of every replica type, in one reconcile instead: every task gets SIGTERM at the
same moment (the trainer saves the step it is on), and the new pods start together, with the
new cluster, from that checkpoint.

Only a change of the user's makes pods roll: the job's spec (a resize, a new image, a new env).
Each template carries a hash of what the user wrote that shaped it (`children.spec_hash`); a
pod whose template has the current hash stays, even off the current revision. A revision that
comes only from a new operator version (one more env var, a new label) so reaches each pod at
its next start, and an upgrade of the operator restarts no running job. A pod made before
templates carried the hash rolls, as any pod did before.

It judges only from what it knows for sure: each StatefulSet's current revision is the one its
controller gives new pods (`status.updateRevision`) once that controller has seen its newest
spec (`status.observedGeneration`), and only once the operator's view holds every StatefulSet
as the operator last applied it (`Observation.applied`). Until then it deletes nothing, so a
restart never takes one replica type now and another a moment later. It costs nothing while
every pod is on its revision: it reads what the watches keep.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tfjob_operator.api.spec import ReplicaType, TFJobSpec
from tfjob_operator.rules import naming
from tfjob_operator.rules.lifecycle.observation import Observation
from tfjob_operator.rules.lifecycle.stops import RESIZED, caused, taking
from tfjob_operator.rules.pods import PodObservation

# The cause of a restart for a new template with the same replica counts (an image, an env).
UPDATED = "Updated"


@dataclass(frozen=True)
class Restart:
    """The pods to delete, all at once, and why (`status.lastStop`'s cause and message)."""

    pods: tuple[PodObservation, ...]
    cause: str
    message: str

    def stop(
        self, last: Mapping[str, Any] | None, now: datetime, stopping: Sequence[str] = ()
    ) -> dict[str, Any]:
        """`status.lastStop` for this restart. The restart is known by the pods it deletes,
        never by a time: `last` (taking these pods too) when it takes one of them already (a
        reconcile whose view does not show all the deletions yet, and so may count the old
        replicas from fewer pods, or name another cause), else a new stop that takes them and
        `stopping`, the uids of the pods already being deleted as it begins."""
        uids = [p.uid for p in self.pods]
        if last is not None and set(uids) & set(last.get("podUIDs") or ()):
            return taking(last, uids)
        return caused(self.cause, self.message, now, [*uids, *stopping])


@dataclass(frozen=True)
class Template:
    """A replica type's current pod template: its revision and its `children.spec_hash`."""

    revision: str
    spec_hash: str


def revisions(job: str, spec: TFJobSpec, seen: Observation) -> dict[ReplicaType, Template] | None:
    """Each replica type's current template; None while any is not known for sure:
    a StatefulSet the view shows older than the operator last applied it, or missing, or one
    that Kubernetes' StatefulSet controller has not caught up with."""
    by_name = {s.name: s for s in seen.statefulsets}
    for name, generation in seen.applied.items():
        s = by_name.get(name)
        if s is None or s.generation < generation:
            return None
    current = {}
    for rt in spec.replicas():
        s = by_name.get(naming.replica_name(job, rt))
        if s is None or not s.settled or not s.update_revision:
            return None
        current[rt] = Template(s.update_revision, s.spec_hash)
    return current


def _outdated(pod: PodObservation, current: Mapping[ReplicaType, Template]) -> bool:
    """Whether the pod is off its current template for a change of the user's."""
    now = current.get(pod.replica_type)
    if now is None or not pod.revision or pod.revision == now.revision:
        return False
    return not pod.spec_hash or pod.spec_hash != now.spec_hash


def restart(
    job: str, spec: TFJobSpec, seen: Observation, last: Mapping[str, Any] | None = None
) -> Restart | None:
    """Every pod of the job that a change of the user's left off its StatefulSet's current
    revision (`_outdated`), none already being deleted, none on a node that stopped
    answering (`nodelost` deletes those); None when there is none, or while the revisions
    are not known for sure (`revisions`). Only for a job that runs: a finished or suspended
    one has no pod to restart."""
    current = revisions(job, spec, seen)
    if current is None:
        return None
    live = [p for p in seen.pods if not p.deleting and p.lost_since is None]
    pods = outdated = tuple(p for p in live if _outdated(p, current))
    if not pods:
        return _unfinished(last, live)
    if _together(spec, pods):
        # The other types' pods too; a type with outdated pods has its newer ones started
        # with the new cluster already (a resize's new workers).
        rolled = {p.replica_type for p in pods} | {ReplicaType.EVALUATOR}
        pods += tuple(p for p in live if p.replica_type not in rolled)
    new = {rt: rs.replicas for rt, rs in spec.replicas().items()}
    old = _old_counts(new, [*seen.pods, *seen.surplus], current)
    changed = [f"{rt.value} {old[rt]} → {n}" for rt, n in new.items() if old[rt] != n]
    count = "1 pod restarts" if len(pods) == 1 else f"{len(pods)} pods restart together"
    if changed:
        message = f"{', '.join(changed)}: {count} with the new cluster"
        return Restart(pods, RESIZED, message)
    types = ", ".join(dict.fromkeys(p.replica_type.value for p in outdated))
    return Restart(pods, UPDATED, f"a new pod template for {types}: {count}")


def _unfinished(last: Mapping[str, Any] | None, live: Sequence[PodObservation]) -> Restart | None:
    """The stored restart (`last`, status.lastStop) whose pods are not all being deleted yet
    (a deletion failed, or the operator stopped between two): the rest of them, for that same
    stop. Its pods on the current template are known only by it."""
    if last is None or not _restart(last):
        return None
    taken = set(last.get("podUIDs") or ())
    pods = tuple(p for p in live if p.uid in taken)
    return Restart(pods, str(last["cause"]), str(last.get("message", ""))) if pods else None


def _together(spec: TFJobSpec, outdated: Sequence[PodObservation]) -> bool:
    """Whether the outdated pods cannot restart alone, so every task of the cluster restarts
    with them: a parameter server (the chief's coordinator holds variables on it and fails
    without it), or any task of a job with none (MultiWorkerMirrored: every task takes part in
    each collective). An Evaluator is outside the cluster, and restarts alone."""
    if spec.replicas().get(ReplicaType.PS) is not None:
        return any(p.replica_type is ReplicaType.PS for p in outdated)
    return any(p.replica_type is not ReplicaType.EVALUATOR for p in outdated)


def _old_counts(
    new: Mapping[ReplicaType, int],
    pods: Sequence[PodObservation],
    current: Mapping[ReplicaType, Template],
) -> dict[ReplicaType, int]:
    """Each replica type's replica count before the change, as its pods of an old revision
    show it (those past a smaller count are still going away as the restart begins); the
    new count for a type that has none."""
    old = dict(new)
    for rt in new:
        indexes = [p.index for p in pods if p.replica_type is rt and _outdated(p, current)]
        if indexes:
            old[rt] = max(indexes) + 1
    return old


def restarting(
    job: str, seen: Observation, last: Mapping[str, Any] | None = None
) -> frozenset[str]:
    """The pods being deleted off an old revision, or for the stored restart (`last`), with
    a parameter server that must restart (`_together`): their exits end a restart, whatever
    the code (a program that does not save on SIGTERM exits 143, or 137 once killed), and
    count as no failure."""
    taken = set((last or {}).get("podUIDs") or ()) if _restart(last) else set()
    current = {
        rt: Template(s.update_revision, s.spec_hash)
        for rt in ReplicaType
        for s in seen.statefulsets
        if s.name == naming.replica_name(job, rt) and s.update_revision
    }
    return frozenset(
        p.name for p in seen.pods if p.deleting and (p.uid in taken or _outdated(p, current))
    )


def _restart(last: Mapping[str, Any] | None) -> bool:
    """Whether the stop `last` is a restart's."""
    return bool(last) and (last or {}).get("cause") in (RESIZED, UPDATED)
