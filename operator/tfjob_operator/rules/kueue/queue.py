"""A job's place in Kueue: the LocalQueue it waits in, the priority class that sets its
priority, and `QueueView`, all the rules need to know of it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tfjob_operator.api.spec import TFJobSpec
from tfjob_operator.rules.kueue import GROUP, POD_PRIORITY_GROUP, PRIORITY_LABEL, QUEUE_LABEL
from tfjob_operator.rules.kueue.admission import Flavor, WorkloadObservation

# The queue of a job without the label under --kueue-manage-all (Kueue's LocalQueue defaulting).
DEFAULT_QUEUE = "default"


@dataclass(frozen=True)
class Queueing:
    """The operator's Kueue setting: whether jobs without the queue label are queued too."""

    manage_all: bool = False


def queue_name(labels: Mapping[str, str], queueing: Queueing | None) -> str | None:
    """The LocalQueue a job waits in; None for a job Kueue does not hold."""
    if queueing is None:
        return None
    name = labels.get(QUEUE_LABEL)
    if name:
        return name
    return DEFAULT_QUEUE if queueing.manage_all else None


def queue_label_patch(labels: Mapping[str, str], queueing: Queueing | None) -> dict[str, Any]:
    """The metadata patch that labels a job queued only by --kueue-manage-all with the queue it
    waits in ({} when it needs none): Kueue's pod and StatefulSet webhooks see a TFJob as the
    queued owner of our children only by that label (FindAncestorJobManagedByKueue), and
    otherwise default the pods into the LocalQueue and gate them. Written once, only when
    absent: a label the user set is never changed."""
    if queueing is None or not queueing.manage_all or labels.get(QUEUE_LABEL):
        return {}
    return {"metadata": {"labels": {QUEUE_LABEL: DEFAULT_QUEUE}}}


@dataclass(frozen=True)
class Priority:
    """The priority a Workload carries: the class it names and that class' value."""

    group: str  # POD_PRIORITY_GROUP (a PriorityClass) or GROUP (a WorkloadPriorityClass)
    name: str
    value: int

    @property
    def kind(self) -> str:
        return "PriorityClass" if self.group == POD_PRIORITY_GROUP else "WorkloadPriorityClass"


def priority_class_api(group: str, kueue_version: str) -> tuple[str, str]:
    """(version, plural) to read a priority class of `group` where Kueue serves
    `kueue_version`."""
    if group == POD_PRIORITY_GROUP:
        return "v1", "priorityclasses"
    return kueue_version, "workloadpriorityclasses"


def priority_class(labels: Mapping[str, str], spec: TFJobSpec) -> tuple[str, str] | None:
    """(group, name) of the class that sets the job's priority, as Kueue's job controllers
    pick it: the WorkloadPriorityClass label, else runPolicy.schedulingPolicy.priorityClass,
    else the first pod template's priorityClassName."""
    if labels.get(PRIORITY_LABEL):
        return GROUP, labels[PRIORITY_LABEL]
    policy = spec.run_policy.scheduling_policy
    if policy is not None and policy.priority_class:
        return POD_PRIORITY_GROUP, policy.priority_class
    for rs in spec.replicas().values():
        name = (rs.template.get("spec") or {}).get("priorityClassName")
        if name:
            return POD_PRIORITY_GROUP, name
    return None


def global_default(classes: Iterable[Mapping[str, Any]]) -> Priority | None:
    """The priority of a job that names no class, as Kueue gives it: the PriorityClass with
    globalDefault (the lowest one, should a race have made two); None when there is none."""
    defaults = [c for c in classes if c.get("globalDefault")]
    if not defaults:
        return None
    low = min(defaults, key=lambda c: int(c.get("value", 0)))
    return Priority(
        POD_PRIORITY_GROUP, (low.get("metadata") or {}).get("name", ""), int(low.get("value", 0))
    )


@dataclass(frozen=True)
class QueueView:
    """Everything the rules need to know of a queued job's place in Kueue."""

    queue: str
    version: str  # the Workload API version served
    workload: WorkloadObservation | None = None
    flavors: Mapping[str, Flavor] = field(default_factory=dict)
    priority: Priority | None = None
    # On a MultiKueue worker: the job's Workload is the one Kueue made for it (`multikueue`),
    # never one of the operator's.
    prebuilt: bool = False
