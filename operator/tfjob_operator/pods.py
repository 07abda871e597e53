"""What the operator reads from a pod: the TensorFlow container's exits, nothing more.

StatefulSet pods always restart, so a pod's phase never says how training went. The truth is in
the container's `state.terminated`, `lastState.terminated` and `restartCount`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import naming
from .api import ReplicaType
from .children import tensorflow_container_index


@dataclass(frozen=True)
class Exit:
    code: int
    reason: str = ""


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
    return Exit(code=int(terminated.get("exitCode", 0)), reason=terminated.get("reason") or "")


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
    return PodObservation(
        name=meta["name"],
        uid=meta.get("uid", ""),
        replica_type=rt,
        index=index,
        running="running" in state,
        exit=_exit(state.get("terminated")),
        last_exit=_exit(last.get("terminated")),
        restart_count=int(cs.get("restartCount", 0)),
        deleting=meta.get("deletionTimestamp") is not None,
    )
