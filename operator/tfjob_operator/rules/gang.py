"""Gang scheduling: the PodGroup a gang scheduler places as a whole, and what the pods carry
to join it. Pure functions of the spec, like every other child.

Three schedulers are supported, each with its own PodGroup kind:
- Kubernetes' own (1.37+, `GenericWorkload`): a `scheduling.k8s.io/v1beta1` Workload and a
  PodGroup whose `schedulingPolicy.gang.minCount` makes it a gang; pods name the PodGroup in
  `spec.schedulingGroup.podGroupName` and keep the default scheduler, whose GangScheduling
  plugin holds them until the whole gang fits. The PodGroup's priority must be its pods'.
- Volcano: `scheduling.volcano.sh/v1beta1` PodGroup; pods name it in the annotation
  `scheduling.k8s.io/group-name` and set `schedulerName: volcano`.
- scheduler-plugins coscheduling: `scheduling.x-k8s.io/v1alpha1` PodGroup; pods carry the
  label `scheduling.x-k8s.io/pod-group` and set the scheduler's name (by default
  `scheduler-plugins-scheduler`, as its Helm chart installs it).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from tfjob_operator.api.quantity import parse_quantity
from tfjob_operator.api.spec import ReplicaType, SchedulingPolicy, TFJobSpec
from tfjob_operator.rules import naming

Manifest = dict[str, Any]

VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"


# The one template of a native Workload, which the job's PodGroup is made from.
WORKLOAD_TEMPLATE = "tfjob"


class Scheduler(enum.StrEnum):
    KUBERNETES = "kubernetes"
    VOLCANO = "volcano"
    SCHEDULER_PLUGINS = "scheduler-plugins"

    @property
    def api(self) -> tuple[str, str, str]:
        """(group, version, plural) of its PodGroup."""
        if self is Scheduler.KUBERNETES:
            return NATIVE_API
        if self is Scheduler.VOLCANO:
            return ("scheduling.volcano.sh", "v1beta1", "podgroups")
        return ("scheduling.x-k8s.io", "v1alpha1", "podgroups")

    @property
    def kinds(self) -> list[tuple[str, str, str]]:
        """(group, version, plural) of what a job's gang is made of: its PodGroup, after the
        Workload it is made from for Kubernetes' own."""
        return [NATIVE_WORKLOADS, NATIVE_API] if self is Scheduler.KUBERNETES else [self.api]

    @property
    def default_name(self) -> str:
        """The schedulerName its usual install registers; "" keeps the pod's own."""
        return {
            Scheduler.KUBERNETES: "",
            Scheduler.VOLCANO: "volcano",
            Scheduler.SCHEDULER_PLUGINS: "scheduler-plugins-scheduler",
        }[self]


# Kubernetes' gang API: PodGroups, and the Workload each is made from.
NATIVE_API = ("scheduling.k8s.io", "v1beta1", "podgroups")
NATIVE_WORKLOADS = ("scheduling.k8s.io", "v1beta1", "workloads")


@dataclass(frozen=True)
class Gang:
    """The operator's gang-scheduling setting: which scheduler, under which schedulerName."""

    scheduler: Scheduler
    scheduler_name: str = ""

    @property
    def pod_scheduler(self) -> str:
        return self.scheduler_name or self.scheduler.default_name

    @property
    def crd(self) -> str:
        group, _, plural = self.scheduler.api
        return f"{plural}.{group}"


# Pods counted first when minAvailable is below the job's size: the ones training needs.
_ORDER = (ReplicaType.CHIEF, ReplicaType.MASTER, ReplicaType.PS, ReplicaType.WORKER)


def gang_pods(spec: TFJobSpec) -> list[tuple[ReplicaType, dict[str, Any]]]:
    """One (replica type, template) per pod that belongs in the gang: every pod but the
    Evaluator, which only reads checkpoints and must not hold the others back."""
    replicas = spec.replicas()
    return [
        (rt, replicas[rt].template)
        for rt in _ORDER
        if rt in replicas
        for _ in range(replicas[rt].replicas)
    ]


def min_available(spec: TFJobSpec) -> int:
    policy = spec.run_policy.scheduling_policy or SchedulingPolicy()
    if policy.min_available is not None:
        return policy.min_available
    return len(gang_pods(spec))


def _requests(template: dict[str, Any]) -> dict[str, Decimal]:
    """A pod's requests as the scheduler counts them: requests, else limits, summed over its
    containers (init containers run one at a time: the largest of them counts)."""
    spec = template.get("spec") or {}
    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        for name, qty in ((res.get("limits") or {}) | (res.get("requests") or {})).items():
            total[name] = total.get(name, Decimal(0)) + parse_quantity(qty)
    for c in spec.get("initContainers") or []:
        res = c.get("resources") or {}
        for name, qty in ((res.get("limits") or {}) | (res.get("requests") or {})).items():
            total[name] = max(total.get(name, Decimal(0)), parse_quantity(qty))
    return total


def format_quantity(value: Decimal) -> str:
    """A quantity Kubernetes reads back exactly: whole numbers plain, the rest in milli-units."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{int((value * 1000).to_integral_value())}m"


def min_resources(spec: TFJobSpec) -> dict[str, str]:
    """What the gang needs free: the policy's minResources, else the requests of the first
    minAvailable pods (Chief, PS, then Workers)."""
    policy = spec.run_policy.scheduling_policy or SchedulingPolicy()
    if policy.min_resources is not None:
        return {k: str(v) for k, v in policy.min_resources.items()}
    total: dict[str, Decimal] = {}
    for _, template in gang_pods(spec)[: min_available(spec)]:
        for name, qty in _requests(template).items():
            total[name] = total.get(name, Decimal(0)) + qty
    return {name: format_quantity(q) for name, q in sorted(total.items()) if q}


def priority_classes(spec: TFJobSpec) -> set[str]:
    """The priorityClassNames the gang's pods name ("" for none): a native PodGroup's priority
    must be each of its pods', so they must agree (`problems`)."""
    return {(t.get("spec") or {}).get("priorityClassName") or "" for _, t in gang_pods(spec)}


def problems(gang: Gang | None, spec: TFJobSpec) -> list[str]:
    """Why the job cannot be a gang of this scheduler: only the native one has a rule the
    spec can break (one priority for the whole gang)."""
    if gang is None or gang.scheduler is not Scheduler.KUBERNETES:
        return []
    if len(priority_classes(spec)) < 2:
        return []
    named = {
        rt.value: repr(c) if (c := (t.get("spec") or {}).get("priorityClassName")) else "none"
        for rt, t in gang_pods(spec)
    }
    listed = ", ".join(f"{rt} {c}" for rt, c in named.items())
    return [
        "spec.tfReplicaSpecs[*].template.spec.priorityClassName: a gang's pods share one "
        f"priority (Kubernetes' gang scheduling), but the replica types name {listed}"
    ]


def _native(job: Any, spec: TFJobSpec) -> list[Manifest]:
    """The job's Workload and the PodGroup made from its one template: a gang of every pod
    but the Evaluator, at the priority its pods share."""
    policy: dict[str, Any] = {"gang": {"minCount": min_available(spec)}}
    (priority,) = priority_classes(spec) or {""}
    template: dict[str, Any] = {"name": WORKLOAD_TEMPLATE, "schedulingPolicy": policy}
    group_spec: dict[str, Any] = {
        "workloadRef": {"workloadName": job.name, "templateName": WORKLOAD_TEMPLATE},
        "schedulingPolicy": policy,
    }
    if priority:
        template["priorityClassName"] = group_spec["priorityClassName"] = priority
    group, version, _ = NATIVE_API
    owner = job.owner_reference()

    def made(kind: str, name: str, body: dict[str, Any]) -> Manifest:
        return {
            "apiVersion": f"{group}/{version}",
            "kind": kind,
            "metadata": {
                "name": name,
                "namespace": job.namespace,
                "labels": naming.child_labels(job.name),
                "ownerReferences": [owner],
            },
            "spec": body,
        }

    controller = {
        "apiGroup": owner["apiVersion"].split("/")[0],
        "kind": owner["kind"],
        "name": job.name,
    }
    return [
        made("Workload", job.name, {"controllerRef": controller, "podGroupTemplates": [template]}),
        made("PodGroup", naming.pod_group_name(job.name), group_spec),
    ]


def gang_children(gang: Gang, job: Any, spec: TFJobSpec) -> list[Manifest]:
    """What the job's gang is made of, in creation order: its PodGroup, after the native
    Workload it is made from."""
    if gang.scheduler is Scheduler.KUBERNETES:
        return _native(job, spec)
    return [pod_group(gang, job, spec)]


def pod_group(gang: Gang, job: Any, spec: TFJobSpec) -> Manifest:
    """The job's PodGroup for Volcano or scheduler-plugins (Kubernetes' own: `_native`);
    `job` is the owning JobRef."""
    policy = spec.run_policy.scheduling_policy or SchedulingPolicy()
    group, version, _ = gang.scheduler.api
    body: dict[str, Any] = {"minMember": min_available(spec)}
    resources = min_resources(spec)
    if resources:
        body["minResources"] = resources
    if gang.scheduler is Scheduler.VOLCANO:
        if policy.queue:
            body["queue"] = policy.queue
        if policy.priority_class:
            body["priorityClassName"] = policy.priority_class
    elif policy.schedule_timeout_seconds is not None:
        body["scheduleTimeoutSeconds"] = policy.schedule_timeout_seconds
    return {
        "apiVersion": f"{group}/{version}",
        "kind": "PodGroup",
        "metadata": {
            "name": naming.pod_group_name(job.name),
            "namespace": job.namespace,
            "labels": naming.child_labels(job.name),
            "ownerReferences": [job.owner_reference()],
        },
        "spec": body,
    }


def ignored_fields(gang: Gang | None, spec: TFJobSpec) -> list[str]:
    """schedulingPolicy fields the chosen scheduler has no place for, for a warning."""
    policy = spec.run_policy.scheduling_policy
    if policy is None:
        return []
    path = "spec.runPolicy.schedulingPolicy"
    if gang is None:
        return [
            f"{path}: the operator runs without a gang scheduler (--gang-scheduler), so the "
            "pods are scheduled one by one"
        ]
    unused_by: dict[Scheduler, list[tuple[str, object]]] = {
        Scheduler.KUBERNETES: [
            ("minResources", policy.min_resources),
            ("queue", policy.queue),
            ("priorityClass", policy.priority_class),
            ("scheduleTimeoutSeconds", policy.schedule_timeout_seconds),
        ],
        Scheduler.VOLCANO: [("scheduleTimeoutSeconds", policy.schedule_timeout_seconds)],
        Scheduler.SCHEDULER_PLUGINS: [
            ("queue", policy.queue),
            ("priorityClass", policy.priority_class),
        ],
    }
    return [
        f"{path}.{name}: {gang.scheduler.value} has no such setting; ignored"
        for name, value in unused_by[gang.scheduler]
        if value is not None
    ]


def joined(
    gang: Gang | None, pods: Iterable[Any], current: Callable[[ReplicaType], str]
) -> Gang | None:
    """The gang the job's pods are made to join now. Kubernetes' own counts toward minCount
    only the pods that name the group, so a pod made alone into it while the job's other pods
    run outside it (made before the operator offered gangs: an upgrade, a gate turned on)
    would wait for them forever. Such a job stays outside until those pods are all made again:
    a pod counts as staying if it is not being deleted and its `spec_hash` is `current` for its
    replica type (an outdated one is restarted with its job); `pods` are `PodObservation`s."""
    if gang is None or gang.scheduler is not Scheduler.KUBERNETES:
        return gang
    for p in pods:
        if p.gang or p.deleting or p.replica_type is ReplicaType.EVALUATOR:
            continue
        if p.spec_hash and p.spec_hash != current(p.replica_type):
            continue
        return None
    return gang


def join(gang: Gang, job: str, rt: ReplicaType, template: dict[str, Any]) -> None:
    """Make a pod template (already our own copy) join the job's gang. A native gang leaves
    the Evaluator out: Kubernetes counts every pod of a PodGroup toward its minCount, so an
    Evaluator inside would let the gang start a training pod short."""
    meta = template.setdefault("metadata", {})
    group = naming.pod_group_name(job)
    if gang.scheduler is Scheduler.KUBERNETES:
        if rt is ReplicaType.EVALUATOR:
            return
        template["spec"]["schedulingGroup"] = {"podGroupName": group}
        if gang.scheduler_name:
            template["spec"]["schedulerName"] = gang.scheduler_name
        return
    if gang.scheduler is Scheduler.VOLCANO:
        meta["annotations"] = {**(meta.get("annotations") or {}), VOLCANO_GROUP_ANNOTATION: group}
    else:
        meta["labels"] = {**(meta.get("labels") or {}), COSCHEDULING_LABEL: group}
    template["spec"]["schedulerName"] = gang.pod_scheduler
