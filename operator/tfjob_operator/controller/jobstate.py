"""What the reconciler remembers of one job between its reconciles (`JobState`): it saves
calls, writes and parsing, and paces them; a replica that starts without any of it decides the
same. All of it goes at once, when the job leaves the index."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tfjob_operator.rules.kueue.admission import WorkloadObservation
from tfjob_operator.rules.kueue.queue import QueueView
from tfjob_operator.rules.lifecycle import JobView
from tfjob_operator.rules.pods import PodObservation

JobKey = tuple[str, str]  # (namespace, name)


@dataclass
class Failing:
    """A job whose reconciles keep failing: since when, how often, and whether it is said."""

    since: float
    attempts: int = 0
    reported: bool = False


@dataclass(frozen=True)
class Written:
    """Our last status write of a job: the object it produced, and the resourceVersions it
    supersedes (the index may still show any of them until the watch delivers our write)."""

    superseded: frozenset[str]
    result: dict[str, Any]


@dataclass(frozen=True)
class CreateCheck:
    """A job whose StatefulSets lack pods: since when, their FailedCreate messages as last
    looked at, and when that was (None: not yet)."""

    since: float
    failures: dict[str, str]
    checked_at: float | None = None
    looks: int = 0  # lists looked at so far


@dataclass
class JobState:
    """What the reconciler remembers of one job between its reconciles. All of it goes at
    once, when the job leaves the index (`Reconciler.state`)."""

    # A digest of the children last applied, so unchanged children are not re-sent on every
    # pod event (the digest, not the children's JSON: kilobytes a job).
    applied: bytes | None = None
    # Each StatefulSet's generation as that apply left it, by name: a view of the
    # StatefulSets older than these predates it (`lifecycle.restart`).
    generations: dict[str, int] = field(default_factory=dict)
    # Bumped by `forget_children`: an apply under way when a child goes records no digest, since
    # what it applied may predate the deletion.
    forgotten: int = 0
    written: Written | None = None
    # The parsed spec, and the (uid, generation, name) it was read from (parsing is not free).
    view: tuple[tuple[Any, ...], JobView] | None = None
    # When a status write that changes pod counts alone is due at the latest (`clock` time).
    counts_due: float | None = None
    failing: Failing | None = None
    create_check: CreateCheck | None = None
    # The job's state (Created, Running, ...) as last written, for the jobs-by-state gauge.
    written_state: str | None = None
    # Pods (by uid) whose own Kubeflow labels were patched in: each once.
    labelled: set[str] = field(default_factory=set)
    # Pods (by uid) deleted for a restart, while the watch may still show them undeleted.
    restarted: set[str] = field(default_factory=set)
    # Pods (by uid) of a finished job deleted as done (`limits.done_pods`), likewise.
    ended: set[str] = field(default_factory=set)
    # Pods (by uid) whose finalizer was taken off (`lifecycle.ended`), likewise: the job's own,
    # and those of an earlier job of its name or of none (`Reconciler.let_go`).
    released: set[str] = field(default_factory=set)
    earlier_released: set[str] = field(default_factory=set)
    # StatefulSets (by name) scaled to 0, while the watch may still show their pods wanted.
    scaled: set[str] = field(default_factory=set)
    # The other controller runPolicy.managedBy names, once its Event is posted ("": none).
    managed_by: str = ""
    # Whether the job's LocalQueue was looked at for MultiKueue (`spec.managedBy` defaulted).
    multikueue_checked: bool = False
    # The queue label patched in (--kueue-manage-all), and the KueueTookOverChild Event
    # posted: each once.
    queue_labelled: bool = False
    kueue_warned: bool = False
    # The job's Kueue Workloads as last seen, by name (`workloads.seen`), and the job's place
    # in Kueue as last decided on.
    workloads: dict[str, WorkloadObservation] = field(default_factory=dict)
    queue: QueueView | None = None
    # Pods deleted since the last reconcile whose end was a stop on request, by uid, as the
    # watch showed them last: their exit and termination message (the step saved) go with
    # them, often before any reconcile sees them.
    departed: dict[str, PodObservation] = field(default_factory=dict)
