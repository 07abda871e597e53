"""What the operator reads from a pod: the TensorFlow container's exits, nothing more.

A StatefulSet's pod says `restartPolicy: Always`, so its phase never says how training went
(where its TensorFlow container has restart rules of its own, a phase Succeeded or Failed says
only that the task ended). The truth is in the container's `state.terminated`,
`lastState.terminated` and `restartCount`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from tfjob_operator.api.spec import ReplicaType
from tfjob_operator.rules import kubeflow, kueue, lineage, naming, nodelost
from tfjob_operator.rules import status as st
from tfjob_operator.rules.children import tensorflow_container_index
from tfjob_protocol import stop


@dataclass(frozen=True)
class Exit:
    code: int
    reason: str = ""
    # The termination message (`/dev/termination-log`), cut to MESSAGE_LIMIT: the trainer says
    # there which step it saved when it was stopped.
    message: str = ""

    @property
    def stopped(self) -> bool:
        """A stop on request (SIGTERM, saved first): never a failure."""
        return self.code == stop.EXIT_STOPPED

    @property
    def saved_step(self) -> int | None:
        """The step a stopped task saved at, as its termination message says."""
        return stop.saved_step(self.message) if self.stopped else None


# Waiting reasons on the normal way to running, or in a restart backoff that the exits already
# account for. Any other (ErrImagePull, ImagePullBackOff, CreateContainerConfigError, ...) needs
# the user, and so does a pod no node can take.
ROUTINE_WAITING = frozenset({"ContainerCreating", "PodInitializing", "CrashLoopBackOff"})
MESSAGE_LIMIT = 300
DEFAULT_SCHEDULER = "default-scheduler"


@dataclass(frozen=True)
class Stuck:
    """Why a pod cannot start: a waiting reason, or Unschedulable, with Kubernetes' message."""

    reason: str
    message: str = ""

    def describe(self) -> str:
        text = f"{self.reason}: {self.message}" if self.message else self.reason
        return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


@dataclass(frozen=True)
class PodObservation:
    name: str
    uid: str
    replica_type: ReplicaType
    index: int
    running: bool = False
    exit: Exit | None = None  # state.terminated: the container is down now
    last_exit: Exit | None = None  # lastState.terminated: the exit before the current state
    restart_count: int = 0
    deleting: bool = False
    stuck: Stuck | None = None
    # A pod that names a scheduler of its own (a gang scheduler) which has not looked at it
    # yet: that scheduler's name, and when the pod was created.
    unscheduled_by: str | None = None
    created: datetime | None = None
    # The per-pod Kubeflow labels it carries (`kubeflow.pod_labels`), as (key, value) pairs.
    kubeflow_labels: tuple[tuple[str, str], ...] = ()
    # Since when its node has stopped answering (`nodelost.lost_since`), and the node's name;
    # None and "" while it answers.
    lost_since: datetime | None = None
    node: str = ""
    # What shows that Kueue's pod integration took the pod for its own (`kueue.pod_takeover`).
    kueue_takeover: str = ""
    # While it is being deleted: since when, and who by when the cluster says so (the
    # DisruptionTarget condition's "reason: message", e.g. a drain's EvictionByEvictionAPI).
    deleted_at: datetime | None = None
    disruption: str = ""
    # The grace period it was deleted with (deletionGracePeriodSeconds), while deleting.
    grace: int | None = None
    # The revision of its StatefulSet's template it was made from, and that template's
    # `children.spec_hash` ("" for a pod made before the operator wrote one).
    revision: str = ""
    spec_hash: str = ""
    # The uid of the StatefulSet that controls it (`lineage`).
    owner: str = ""
    # The PodGroup of Kubernetes' own gang it names (spec.schedulingGroup), "" for none.
    gang: str = ""
    # Its phase is Succeeded or Failed: every container has ended and none will start again
    # (a TensorFlow container with restart rules whose exit ended its task, `restartpolicy`).
    ended: bool = False
    # The API group whose operator's finalizer holds it (`lifecycle.ended`), "" for none.
    finalized: str = ""
    # Its TensorFlow container has ended, but another of its containers has yet to end once
    # (Katib's metrics collector, a service mesh's proxy): a finished job waits a while.
    others: bool = False

    @property
    def up(self) -> bool:
        """Running, as far as anyone can tell: not on a node that stopped answering."""
        return self.running and self.lost_since is None

    def scheduler_missing(self, now: datetime, grace: float) -> Stuck | None:
        """Why the pod waits, once its scheduler has ignored it for `grace` seconds."""
        if self.unscheduled_by is None or self.created is None:
            return None
        waited = (now - self.created).total_seconds()
        if waited < grace:
            return None
        return Stuck(
            "NotScheduled",
            f"scheduler '{self.unscheduled_by}' has not looked at the pod for {waited:.0f}s; "
            "is it running? (the operator's --gang-scheduler must name an installed scheduler)",
        )

    @property
    def terminations(self) -> int:
        """How many times the container has exited in this pod's life."""
        return self.restart_count + 1 if self.exit is not None else self.restart_count

    @property
    def latest_exit(self) -> Exit | None:
        return self.exit if self.exit is not None else self.last_exit

    def known_exits(self) -> list[Exit]:
        """The exits the pod still shows, oldest first (at most the two newest)."""
        if self.exit is not None:
            return [e for e in (self.last_exit, self.exit) if e is not None]
        return [self.last_exit] if self.last_exit is not None else []


def _exit(terminated: dict[str, Any] | None) -> Exit | None:
    if not terminated:
        return None
    return Exit(
        code=int(terminated.get("exitCode", 0)),
        reason=terminated.get("reason") or "",
        message=(terminated.get("message") or "")[:MESSAGE_LIMIT],
    )


def _grace(meta: dict[str, Any]) -> int | None:
    grace = meta.get("deletionGracePeriodSeconds")
    return None if grace is None else int(grace)


def _deleted_at(meta: dict[str, Any]) -> datetime | None:
    """When the pod's deletion began: its deletionTimestamp is that time plus its grace."""
    at = st.parse_timestamp(meta.get("deletionTimestamp"))
    if at is None:
        return None
    return at - timedelta(seconds=_grace(meta) or 0)


def _disruption(pod: dict[str, Any]) -> str:
    """Why the cluster stops the pod, when it says so (Kubernetes 1.26+): "reason: message"."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (cond.get("type"), cond.get("status")) == ("DisruptionTarget", "True"):
            why = cond.get("reason") or "DisruptionTarget"
            text = f"{why}: {cond['message']}" if cond.get("message") else why
            return text[:MESSAGE_LIMIT]
    return ""


ENDED_PHASES = ("Succeeded", "Failed")

# Why the scheduler did not place a pod, as its PodScheduled condition says: it fits nowhere
# (its gang included), or the scheduler could not try (a gang whose pods' priorities differ).
NOT_PLACED = ("Unschedulable", "SchedulerError")


def _stuck(pod: dict[str, Any], state: dict[str, Any]) -> Stuck | None:
    waiting = state.get("waiting") or {}
    if waiting.get("reason") and waiting["reason"] not in ROUTINE_WAITING:
        return Stuck(waiting["reason"], waiting.get("message") or "")
    for cond in (pod.get("status") or {}).get("conditions") or []:
        reason = cond.get("reason")
        if (cond.get("type"), cond.get("status")) == ("PodScheduled", "False") and (
            reason in NOT_PLACED
        ):
            return Stuck(reason, cond.get("message") or "")
    return None


def _unscheduled_by(pod: dict[str, Any]) -> str | None:
    """The scheduler a pending pod waits for, when it is not the default one and has not
    said anything yet (no PodScheduled condition): a scheduler that may not be running."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    scheduler = spec.get("schedulerName") or DEFAULT_SCHEDULER
    if scheduler == DEFAULT_SCHEDULER or spec.get("nodeName"):
        return None
    conditions = status.get("conditions") or []
    if any(c.get("type") == "PodScheduled" for c in conditions):
        return None
    return scheduler


def observe(pod: dict[str, Any]) -> PodObservation | None:
    """Reduce a pod to what the lifecycle rules need; None for pods that are not ours."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    rt = naming.replica_type_of(labels.get(naming.LABEL_REPLICA_TYPE, ""))
    index = naming.pod_index(meta.get("name", ""))
    if rt is None or index is None:
        return None
    spec_containers = (pod.get("spec") or {}).get("containers") or []
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    cs: dict[str, Any] = {}
    if spec_containers:
        name = spec_containers[tensorflow_container_index(pod)].get("name")
        cs = next((s for s in statuses if s.get("name") == name), {})
    state, last = cs.get("state") or {}, cs.get("lastState") or {}
    lost = nodelost.lost_since(pod, statuses)
    deleting = meta.get("deletionTimestamp") is not None
    # Another container that has not ended even once: one the pod's Always restarts (Katib's
    # collector) has done its work when it first ended.
    others = "terminated" in state and any(
        "terminated" not in (s.get("state") or {}) and not s.get("restartCount")
        for s in statuses
        if s is not cs
    )
    return PodObservation(
        name=meta["name"],
        uid=meta.get("uid", ""),
        replica_type=rt,
        index=index,
        running="running" in state,
        exit=_exit(state.get("terminated")),
        last_exit=_exit(last.get("terminated")),
        restart_count=int(cs.get("restartCount", 0)),
        deleting=deleting,
        stuck=_stuck(pod, state),
        unscheduled_by=_unscheduled_by(pod),
        created=st.parse_timestamp(meta.get("creationTimestamp")),
        kubeflow_labels=tuple(
            (k, labels[k]) for k in (kubeflow.REPLICA_INDEX, kubeflow.JOB_ROLE) if k in labels
        ),
        # The node only when lost: a pod's binding alone then changes no observation.
        node=(pod.get("spec") or {}).get("nodeName") or "" if lost is not None else "",
        lost_since=lost,
        kueue_takeover=kueue.pod_takeover(pod),
        # Only while deleting: a condition alone changes no observation.
        deleted_at=_deleted_at(meta) if deleting else None,
        disruption=_disruption(pod) if deleting else "",
        grace=_grace(meta) if deleting else None,
        revision=labels.get(naming.LABEL_REVISION, ""),
        spec_hash=(meta.get("annotations") or {}).get(naming.ANNOTATION_SPEC_HASH, ""),
        owner=lineage.controller_uid(meta),
        gang=((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName") or "",
        ended=(pod.get("status") or {}).get("phase") in ENDED_PHASES,
        finalized=naming.finalizer_group(meta.get("finalizers") or ()),
        others=others,
    )
