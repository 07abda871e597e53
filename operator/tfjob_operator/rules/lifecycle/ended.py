"""A task that ended stays ended (where the API server keeps container restart rules).

The TensorFlow container's own restart rules keep a task's container down once its exit ends
the task (`restartpolicy`). When every container of the pod has ended, its phase is Succeeded
or Failed, and Kubernetes' StatefulSet controller deletes it to make it again, which would run
the task's program once more. The operator's finalizer holds such a pod (`held`) for as long as
its StatefulSet would make it again; the job's end (scaled down, or deleted) lets it go
(`releases`). Every other deletion of a pod of ours is let go at once: it stops a task that
has not ended, as it always did.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from tfjob_operator.api.spec import ReplicaType, RestartPolicy, TFJobSpec
from tfjob_operator.rules import naming
from tfjob_operator.rules.pods import PodObservation
from tfjob_operator.rules.restartpolicy import is_retryable
from tfjob_operator.rules.statefulsets import StatefulSetObservation

# How long a finished job waits for a done pod's other containers (Katib's metrics collector,
# a service mesh's proxy) before its cleanPodPolicy removes the pod all the same.
OTHERS_TIMEOUT = timedelta(seconds=30)

Policies = Mapping[ReplicaType, RestartPolicy]


def restart_policies(spec: TFJobSpec | None) -> Policies:
    """Each replica type's restartPolicy as the spec says now (none for an invalid spec)."""
    if spec is None:
        return {}
    return {rt: rs.restart_policy for rt, rs in spec.replicas().items()}


def task_ended(pod: PodObservation, policies: Policies) -> bool:
    """Whether the pod is in a terminal phase because its task ended: its TensorFlow container
    exited 0, or with a code its replica's restartPolicy does not retry (any code, where the
    policy is not known). An evicted pod, or one whose exit is retried, did not end its task:
    it is made again."""
    ex = pod.latest_exit
    if not pod.ended or ex is None:
        return False
    policy = policies.get(pod.replica_type)
    return ex.code == 0 or policy is None or not is_retryable(policy, ex.code)


def settled(pod: PodObservation, policies: Policies) -> PodObservation:
    """The pod as the lifecycle reads it: one held because its task ended is not being stopped
    (the StatefulSet controller's deletion of a pod in a terminal phase stops nothing)."""
    if pod.deleting and pod.finalized and task_ended(pod, policies):
        return replace(pod, deleting=False, deleted_at=None, disruption="", grace=None)
    return pod


def held(pod: PodObservation, sets: Collection[StatefulSetObservation], policies: Policies) -> bool:
    """Whether the operator's finalizer keeps the pod: its task ended, and its StatefulSet, as
    it stands, would make it again (not deleted, not scaled below it, the same template)."""
    if not (pod.finalized and task_ended(pod, policies)):
        return False
    owner = next((s for s in sets if s.uid == pod.owner), None)
    return (
        owner is not None
        and not owner.deleting
        and owner.replicas > pod.index
        and (not owner.spec_hash or not pod.spec_hash or owner.spec_hash == pod.spec_hash)
    )


def releases(
    pods: Sequence[PodObservation],
    sets: Collection[StatefulSetObservation],
    policies: Policies,
    group: str,
) -> list[tuple[str, str]]:
    """(name, uid) of the pods being deleted that the finalizer of `group`'s operator holds
    and no longer needs to: every one but those `held`."""
    return [
        (p.name, p.uid)
        for p in pods
        if p.finalized == group and p.deleting and not held(p, sets, policies)
    ]


def waits_for_others(
    pods: Sequence[PodObservation], completed: datetime, now: datetime
) -> tuple[frozenset[str], float | None]:
    """(names of the StatefulSets whose scale-down waits, seconds until the wait ends) for a
    finished job: a held pod whose TensorFlow container has ended while another of its
    containers runs on keeps its StatefulSet up, until OTHERS_TIMEOUT after completion."""
    left = (completed + OTHERS_TIMEOUT - now).total_seconds()
    waiting = frozenset(naming.statefulset_of(p.name) for p in pods if p.finalized and p.others)
    if not waiting or left <= 0:
        return frozenset(), None
    return waiting, left
