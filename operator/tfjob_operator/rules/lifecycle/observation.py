"""What one reconcile saw of a job's world, gathered once instead of passed piece by piece."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from tfjob_operator.api.spec import TFJobSpec
from tfjob_operator.rules.gang import Gang
from tfjob_operator.rules.kueue.queue import QueueView
from tfjob_operator.rules.pods import PodObservation
from tfjob_operator.rules.statefulsets import StatefulSetObservation


@dataclass(frozen=True)
class Observation:
    """The pods, owned StatefulSets and surroundings of one job, at `now`.

    `pods` are the replica pods the spec asks for, by replica type and index (`replica_pods`);
    `create_failures` the latest FailedCreate message of each StatefulSet that lacks pods;
    `error` a reconcile failure that persists; `gang` the operator's gang scheduler, if any;
    `queue` the job's place in Kueue, for a job that waits in a LocalQueue; `departed` the
    replica pods deleted since the last reconcile, as they last were (what a stopped one said).
    """

    pods: tuple[PodObservation, ...]
    now: datetime
    cluster_domain: str
    statefulsets: Sequence[StatefulSetObservation] = ()
    create_failures: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None
    gang: Gang | None = None
    queue: QueueView | None = None
    departed: tuple[PodObservation, ...] = ()
    # Pods of the spec's replica types past its replica count, which their StatefulSets scale
    # down; and each StatefulSet's generation as the operator last applied it, by name (none
    # known: {}), to tell a view that predates that apply (`restart`).
    surplus: tuple[PodObservation, ...] = ()
    applied: Mapping[str, int] = field(default_factory=dict)
    # Whether the API server keeps container restart rules: the pods are rendered with them.
    restart_rules: bool = False


def replica_pods(
    spec: TFJobSpec | None, observed: Iterable[PodObservation]
) -> tuple[PodObservation, ...]:
    """The pods of the replicas the spec asks for, sorted; none for an invalid spec, which asks
    for none (and whose pods are not even looked at)."""
    if spec is None:
        return ()
    replicas = spec.replicas()
    return tuple(
        sorted(
            (
                p
                for p in observed
                if p.replica_type in replicas and p.index < replicas[p.replica_type].replicas
            ),
            key=lambda p: (p.replica_type.value, p.index),
        )
    )


def surplus_pods(
    spec: TFJobSpec | None, observed: Iterable[PodObservation]
) -> tuple[PodObservation, ...]:
    """The pods of the spec's replica types at an index past their replica count."""
    if spec is None:
        return ()
    replicas = spec.replicas()
    return tuple(
        p
        for p in observed
        if p.replica_type in replicas and p.index >= replicas[p.replica_type].replicas
    )
