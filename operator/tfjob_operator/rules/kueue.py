"""Kueue: the Workload a queued TFJob asks admission with, and what Kueue's answer means for
the job. Pure functions, like every other child.

Kueue's scheduler and Workload controller admit what a Workload describes, whoever owns it. The
operator plays the part Kueue's own job controllers play (`jobframework`): it creates the
Workload, starts the job once it is admitted, with the admitted flavors' node labels and
tolerations, stops it when it is evicted and then gives the quota reservation back, keeps the
PodsReady condition and marks the Workload Finished. The fields follow Kueue's v1beta2 API
(Kueue v0.19); v1beta1 differs only in how the priority class is named.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tfjob_operator.api.spec import GROUP as TFJOB_GROUP
from tfjob_operator.api.spec import ReplicaType, TFJobSpec
from tfjob_operator.rules import naming
from tfjob_operator.rules import status as st

Manifest = dict[str, Any]

GROUP = "kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")  # newest first: the one used is the newest served
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Kueue's label for a WorkloadPriorityClass; it comes before the pods' PriorityClass.
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
POD_PRIORITY_GROUP = "scheduling.k8s.io"  # the pods' PriorityClasses
# The queue of a job without the label under --kueue-manage-all (Kueue's LocalQueue defaulting).
DEFAULT_QUEUE = "default"
PODSETS_HASH = f"{TFJOB_GROUP}/podsets-hash"
# ... and of what admission decides on (counts, requests, placement, priority): a Workload
# that holds quota is replaced only when this changes, so that a new image, or an operator
# upgrade that renders pods anew, rolls the pods instead of sending the job back to the queue.
ADMISSION_HASH = f"{TFJOB_GROUP}/admission-hash"
# The pod spec fields Kueue's admission reads.
ADMISSION_FIELDS = (
    "nodeSelector",
    "tolerations",
    "affinity",
    "priorityClassName",
    "runtimeClassName",
    "overhead",
)
# Eviction reasons after which Kueue's job controllers mark the Workload Requeued=True.
REQUEUED_REASONS = ("Preempted", "NodeFailures")
# Reasons of the job's Suspended condition while Kueue holds it, and once it admits it.
QUEUED, EVICTED, ADMITTED = st.Reason.QUEUED, st.Reason.EVICTED, st.Reason.ADMITTED
MESSAGE_LIMIT = 32768  # metav1.Condition's message limit


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


@dataclass(frozen=True)
class Placement:
    """What admission gives one replica type's pods: the flavors' node labels and tolerations,
    and the admission checks' pod set updates."""

    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[str, ...] = ()  # each as sorted JSON, so that the value is hashable
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()


def place(template: dict[str, Any], placement: Placement) -> None:
    """Give a pod template (already our own copy) what admission assigned to it."""
    meta = template.setdefault("metadata", {})
    if placement.labels:
        meta["labels"] = {**(meta.get("labels") or {}), **dict(placement.labels)}
    if placement.annotations:
        meta["annotations"] = {**(meta.get("annotations") or {}), **dict(placement.annotations)}
    spec = template["spec"]
    if placement.node_selector:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **dict(placement.node_selector)}
    if placement.tolerations:
        have = list(spec.get("tolerations") or [])
        for raw in placement.tolerations:
            toleration = json.loads(raw)
            if toleration not in have:
                have.append(toleration)
        spec["tolerations"] = have


@dataclass(frozen=True)
class Flavor:
    """What the operator reads of a ResourceFlavor: the node labels and tolerations it gives."""

    node_labels: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[str, ...] = ()

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Flavor:
        spec = body.get("spec") or {}
        return cls(
            tuple(sorted((spec.get("nodeLabels") or {}).items())),
            tuple(json.dumps(t, sort_keys=True) for t in spec.get("tolerations") or []),
        )


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class WorkloadObservation:
    """What the operator reads of its Workload. `conditions` keeps them whole (as JSON), since
    a status write sends the list back with ours changed."""

    name: str
    resource_version: str
    podsets_hash: str
    admission_hash: str = ""
    conditions: tuple[str, ...] = ()
    cluster_queue: str = ""
    # podSet name -> ((resource, flavor), ...), from status.admission
    flavors: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    has_admission: bool = False
    # podSet name -> the Ready admission checks' updates for it, merged (as a Placement)
    updates: tuple[tuple[str, Placement], ...] = ()
    checks_pending: tuple[str, ...] = ()

    def condition(self, type_: str) -> Condition | None:
        for raw in self.conditions:
            c = json.loads(raw)
            if c.get("type") == type_:
                return Condition(
                    type_, c.get("status", ""), c.get("reason", ""), c.get("message", "")
                )
        return None

    def is_true(self, type_: str) -> bool:
        c = self.condition(type_)
        return c is not None and c.status == "True"

    @property
    def evicted(self) -> Condition | None:
        c = self.condition("Evicted")
        return c if c is not None and c.status == "True" else None

    @property
    def admitted(self) -> bool:
        """Admitted and not being evicted: the job may run."""
        return self.is_true("Admitted") and self.evicted is None and self.has_admission

    @property
    def reserved(self) -> bool:
        return self.is_true("QuotaReserved") or self.has_admission

    @property
    def finished(self) -> bool:
        return self.is_true("Finished")

    def flavor_names(self) -> set[str]:
        return {flavor for _, assigned in self.flavors for _, flavor in assigned}


def observe_workload(body: Mapping[str, Any]) -> WorkloadObservation:
    """Reduce a Workload to what the rules read."""
    meta = body.get("metadata") or {}
    status = body.get("status") or {}
    admission = status.get("admission") or {}
    flavors = tuple(
        sorted(
            (a.get("name", ""), tuple(sorted((a.get("flavors") or {}).items())))
            for a in admission.get("podSetAssignments") or []
        )
    )
    updates: dict[str, Placement] = {}
    pending: list[str] = []
    for check in status.get("admissionChecks") or []:
        if check.get("state") != "Ready":
            pending.append(check.get("name", ""))
            continue
        for u in check.get("podSetUpdates") or []:
            prior = updates.get(u.get("name", ""), Placement())
            updates[u.get("name", "")] = Placement(
                prior.node_selector + tuple(sorted((u.get("nodeSelector") or {}).items())),
                prior.tolerations
                + tuple(json.dumps(t, sort_keys=True) for t in u.get("tolerations") or []),
                prior.labels + tuple(sorted((u.get("labels") or {}).items())),
                prior.annotations + tuple(sorted((u.get("annotations") or {}).items())),
            )
    return WorkloadObservation(
        name=meta.get("name", ""),
        resource_version=meta.get("resourceVersion", ""),
        podsets_hash=(meta.get("annotations") or {}).get(PODSETS_HASH, ""),
        admission_hash=(meta.get("annotations") or {}).get(ADMISSION_HASH, ""),
        conditions=tuple(json.dumps(c, sort_keys=True) for c in status.get("conditions") or []),
        cluster_queue=admission.get("clusterQueue", ""),
        flavors=flavors,
        has_admission=bool(admission),
        updates=tuple(sorted(updates.items())),
        checks_pending=tuple(sorted(pending)),
    )


def podset_name(rt: ReplicaType) -> str:
    return rt.value.lower()


def workload_name(job: str, uid: str) -> str:
    """Like Kueue's own: the kind, the job's name, and a hash that tells a re-created job's
    Workload apart (a name is at most 253 characters)."""
    digest = hashlib.sha256(f"{job}/{uid}".encode()).hexdigest()[:5]
    return f"tfjob-{job[:240]}-{digest}"


def podsets(spec: TFJobSpec, templates: Mapping[ReplicaType, dict[str, Any]]) -> list[Manifest]:
    """One podSet per replica type: its pod count and its pod template as the operator renders
    it (before admission places it), which Kueue reads the requests from. A podSet template
    holds only labels and annotations in its metadata."""
    return [
        {
            "name": podset_name(rt),
            "count": rs.replicas,
            "template": {
                "metadata": {
                    k: v
                    for k, v in (templates[rt].get("metadata") or {}).items()
                    if k in ("labels", "annotations")
                },
                "spec": templates[rt]["spec"],
            },
        }
        for rt, rs in spec.replicas().items()
    ]


def workload(
    job: Any,
    version: str,
    queue: str,
    sets: list[dict[str, Any]],
    priority: Priority | None,
) -> Manifest:
    """The job's Workload; `job` is the owning JobRef, `sets` its `podsets`."""
    body: dict[str, Any] = {"queueName": queue, "podSets": sets}
    if priority is not None:
        if version == "v1beta1":
            body["priorityClassName"] = priority.name
            body["priorityClassSource"] = (
                "scheduling.k8s.io/priorityclass"
                if priority.group == POD_PRIORITY_GROUP
                else "kueue.x-k8s.io/workloadpriorityclass"
            )
        else:
            body["priorityClassRef"] = {
                "group": priority.group,
                "kind": priority.kind,
                "name": priority.name,
            }
        body["priority"] = priority.value
    labels = naming.child_labels(job.name)
    labels[JOB_UID_LABEL] = job.uid
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job.name, job.uid),
            "namespace": job.namespace,
            "labels": labels,
            "annotations": {
                PODSETS_HASH: _digest(body),
                ADMISSION_HASH: admission_hash(body),
            },
            "ownerReferences": [job.owner_reference()],
        },
        "spec": body,
    }


def _digest(obj: Any) -> str:
    """A short hash of JSON-able data (PODSETS_HASH: the Workload's whole spec as written)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def admission_hash(spec: Mapping[str, Any]) -> str:
    """A hash of what admission decides on: each podSet's count, its containers' resources and
    the pod fields that choose a flavor, and the priority."""
    what = {
        "priority": [spec.get(k) for k in ("priority", "priorityClassRef", "priorityClassName")],
        "queue": spec.get("queueName"),
        "podSets": [
            {
                "name": p["name"],
                "count": p["count"],
                "resources": [
                    (c.get("name"), c.get("resources"))
                    for kind in ("initContainers", "containers")
                    for c in p["template"]["spec"].get(kind) or []
                ],
                **{k: p["template"]["spec"].get(k) for k in ADMISSION_FIELDS},
            }
            for p in spec.get("podSets") or []
        ],
    }
    return _digest(what)


def stale(observed: WorkloadObservation, wanted: Manifest) -> bool:
    """Whether the job's Workload no longer describes it: any change while it waits; while it
    holds quota, only a change of what admission decided on."""
    notes: dict[str, str] = wanted["metadata"]["annotations"]
    if observed.reserved:
        return observed.admission_hash != notes[ADMISSION_HASH]
    return observed.podsets_hash != notes[PODSETS_HASH]


def placements(
    observed: WorkloadObservation, flavors: Mapping[str, Flavor]
) -> dict[ReplicaType, Placement] | None:
    """Each replica type's placement from the admission; None while a flavor is unread."""
    updates = dict(observed.updates)
    result: dict[ReplicaType, Placement] = {}
    for rt in ReplicaType:
        name = podset_name(rt)
        assigned = dict(observed.flavors).get(name, ())
        node: dict[str, str] = {}
        tolerations: list[str] = []
        for _, flavor_name in assigned:
            flavor = flavors.get(flavor_name)
            if flavor is None:
                return None
            node.update(flavor.node_labels)
            tolerations += [t for t in flavor.tolerations if t not in tolerations]
        update = updates.get(name, Placement())
        node.update(update.node_selector)
        tolerations += [t for t in update.tolerations if t not in tolerations]
        result[rt] = Placement(
            tuple(sorted(node.items())),
            tuple(tolerations),
            tuple(sorted(dict(update.labels).items())),
            tuple(sorted(dict(update.annotations).items())),
        )
    return result


@dataclass(frozen=True)
class QueueView:
    """Everything the rules need to know of a queued job's place in Kueue."""

    queue: str
    version: str  # the Workload API version served
    workload: WorkloadObservation | None = None
    flavors: Mapping[str, Flavor] = field(default_factory=dict)
    priority: Priority | None = None


@dataclass
class WorkloadDecision:
    """What to do with the job's Workload: create it (after deleting a stale one), or write
    its status (a merge patch that names the resourceVersion it was computed from)."""

    create: Manifest | None = None
    delete: str | None = None
    status_patch: dict[str, Any] = field(default_factory=dict)


def _condition(type_: str, status: bool, reason: str, message: str, now: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "lastTransitionTime": now,
    }


def _set(conditions: list[dict[str, Any]], new: dict[str, Any]) -> bool:
    """Set one condition the way Kubernetes' meta.SetStatusCondition does; True if changed."""
    for i, c in enumerate(conditions):
        if c.get("type") != new["type"]:
            continue
        same = all(c.get(k) == new[k] for k in ("status", "reason", "message"))
        if same:
            return False
        if c.get("status") == new["status"]:
            new = {
                **new,
                "lastTransitionTime": c.get("lastTransitionTime", new["lastTransitionTime"]),
            }
        conditions[i] = new
        return True
    conditions.append(new)
    return True


def workload_status(
    observed: WorkloadObservation,
    *,
    active_pods: int,
    pods_ready: bool,
    finished: tuple[bool, str] | None,
    now: datetime,
) -> dict[str, Any]:
    """The Workload status patch the job's state calls for; {} when nothing changes.

    - evicted, and no pod of the job active any more: the quota reservation is given back
      (QuotaReserved False, admission cleared, Admitted False, Requeued), as Kueue's job
      controllers do;
    - admitted: PodsReady follows the pods (Kueue's waitForPodsReady reads it);
    - finished (succeeded?, message): Finished True, so that the quota frees at once.
    """
    stamp = st.timestamp(now)
    conditions = [json.loads(c) for c in observed.conditions]
    patch: dict[str, Any] = {}
    changed = False
    if finished is not None:
        if not observed.finished:
            ok, message = finished
            reason = "Succeeded" if ok else "Failed"
            changed |= _set(conditions, _condition("Finished", True, reason, message, stamp))
    elif observed.evicted is not None:
        ev = observed.evicted
        if observed.reserved and active_pods == 0:
            changed |= _set(
                conditions,
                _condition("Requeued", ev.reason in REQUEUED_REASONS, ev.reason, ev.message, stamp),
            )
            changed |= _set(
                conditions, _condition("QuotaReserved", False, "Pending", ev.message, stamp)
            )
            if observed.is_true("Admitted"):
                changed |= _set(
                    conditions,
                    _condition(
                        "Admitted", False, "NoReservation", "The workload has no reservation", stamp
                    ),
                )
            if observed.has_admission:
                patch["admission"] = None
                changed = True
    elif observed.admitted:
        prior = observed.condition("PodsReady")
        if pods_ready:
            recovering = prior is not None and prior.reason in ("WaitForRecovery", "Recovered")
            new = _condition(
                "PodsReady",
                True,
                "Recovered" if recovering else "Started",
                "All pods reached readiness and the workload is running",
                stamp,
            )
        elif prior is not None and (prior.status == "True" or prior.reason == "WaitForRecovery"):
            new = _condition(
                "PodsReady",
                False,
                "WaitForRecovery",
                "At least one pod has failed, waiting for recovery",
                stamp,
            )
        else:
            new = _condition(
                "PodsReady", False, "WaitForStart", "Not all pods are ready or succeeded", stamp
            )
        changed |= _set(conditions, new)
    if not changed:
        return {}
    patch["conditions"] = conditions
    return {"metadata": {"resourceVersion": observed.resource_version}, "status": patch}


def waiting_message(view: QueueView) -> str:
    """Why a queued job has no pod, with Kueue's own word when it has said one."""
    wl = view.workload
    where = f"LocalQueue {view.queue}"
    if wl is None:
        return f"waiting for Kueue to admit it ({where}); creating its Workload"
    evicted = wl.evicted
    if evicted is not None:
        return (
            f"evicted by Kueue ({evicted.reason}: {evicted.message}); the pods stop, the "
            f"checkpoint stays, and the job resumes when {where} admits Workload {wl.name} again"
        )
    if wl.is_true("QuotaReserved") and wl.checks_pending:
        return (
            f"Workload {wl.name} holds quota in ClusterQueue {wl.cluster_queue}; waiting for "
            f"admission checks {', '.join(wl.checks_pending)}"
        )
    said = wl.condition("QuotaReserved")
    detail = f": {said.message}" if said is not None and said.message else ""
    return f"waiting for Kueue to admit Workload {wl.name} ({where}){detail}"


def admitted_message(wl: WorkloadObservation) -> str:
    shown = "; ".join(
        f"{podset}: {', '.join(f'{r}={f}' for r, f in assigned)}" for podset, assigned in wl.flavors
    )
    return f"admitted by Kueue in ClusterQueue {wl.cluster_queue} (flavors: {shown or 'none'})"


def pods_of(spec: TFJobSpec, job: str) -> Iterable[str]:
    """Every pod the job has when it runs, by name."""
    for rt, rs in spec.replicas().items():
        for i in range(rs.replicas):
            yield naming.pod_name(job, rt, i)
