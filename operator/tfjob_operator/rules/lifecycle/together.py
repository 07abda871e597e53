"""A parameter server stopped on purpose stops its whole job, so that no step is lost.

A parameter server holds variables that only the chief saves. Drained or deleted alone, it
served until its grace period ended while the chief trained on, and the chief then failed as
for a lost peer: up to one checkpoint interval lost. The operator stops every other task of
the job as soon as it sees such a parameter server going: the chief gets SIGTERM while that
server still serves (it serves until the chief is gone: `stopping.wait_for_chief`), saves at
the step it is on, and the job restarts together from that step. The pods it deletes join
the stop the parameter server began (`status.lastStop.podUIDs`): no stop of their own.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from tfjob_operator.api.spec import ReplicaType
from tfjob_operator.rules.lifecycle.observation import Observation
from tfjob_operator.rules.pods import PodObservation

REASON = "StoppingWithParameterServer"  # the Event, once, as the stop begins


@dataclass(frozen=True)
class Together:
    """The parameter server that is going, and the pods to stop with it."""

    going: PodObservation
    pods: tuple[PodObservation, ...]

    @property
    def message(self) -> str:
        names = ", ".join(p.name for p in self.pods)
        return (
            f"parameter server {self.going.name} is stopping; the job stops with it ({names}): "
            "the chief saves while that server still serves, and the job restarts together"
        )


def going(seen: Observation, ours: Collection[str]) -> PodObservation | None:
    """A parameter server being deleted by the cluster, on a node that answers (`nodelost`
    deletes the others), the first to go; `ours`: the names of the pods the operator's own
    stops delete (a restart's, a suspend's), which are none."""
    deleting = [
        p
        for p in seen.pods
        if p.replica_type is ReplicaType.PS
        and p.deleting
        and p.lost_since is None
        and p.deleted_at is not None
        and p.name not in ours
    ]
    return min(deleting, key=lambda p: (p.deleted_at, p.name), default=None)


def with_parameter_server(seen: Observation, ours: Collection[str] = ()) -> Together | None:
    """The pods still running that were there before a parameter server began to go: each of
    those is stopped with it. A pod made after (a task's new pod, while that server still
    waits for its chief) is the job's next run, and stays. None when there is none."""
    ps = going(seen, ours)
    if ps is None or ps.deleted_at is None:
        return None
    began = ps.deleted_at
    pods = tuple(
        p
        for p in seen.pods
        if not p.deleting and p.lost_since is None and (p.created is None or p.created < began)
    )
    return Together(ps, pods) if pods else None
