"""A small cluster for the fault explorer: the API server's objects (TFJobs, StatefulSets,
Services, pods), Kubernetes' StatefulSet controller and garbage collector, and a kubelet whose
containers follow a script, all advanced one tick at a time. The operator's real `Reconciler`
runs against it through `SimKube`, which records every API call and can fail any one of them
(`Fault`).

A task's container runs for its script's ticks, then exits with its code; the kubelet starts it
again, as the pod's `Always` says, or as the container's own restart rules say where the
operator renders them (`restartpolicy`): then a pod whose container stays down is Succeeded or
Failed, and the StatefulSet controller deletes it, to make it again once it is gone. A deleted
pod's container gets SIGTERM and, as the trainer does, saves and exits `stop.EXIT_STOPPED`; the
pod is gone a tick later, once no finalizer holds it."""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import urllib3

from tests.unit.operator.controller.fakes import api_error, merge
from tests.unit.operator.rules.kueue.played import cond
from tfjob_operator.api.spec import GROUP
from tfjob_operator.controller.client import NotLeader
from tfjob_operator.rules import naming
from tfjob_operator.rules import status as st
from tfjob_protocol import stop
from tfjob_testbed.core.jobs import container_status, kubelet_restarts

# The calls that change something in the cluster: a reconcile that makes none has settled.
WRITES = frozenset(
    {
        "apply",
        "patch_status",
        "scale_to_zero",
        "delete_child",
        "delete_job",
        "patch_job",
        "delete_pod",
        "force_delete_pod",
        "label_pod",
        "release_pod",
        "create_workload",
        "delete_workload",
        "patch_workload",
        "patch_workload_status",
    }
)


class Crash(BaseException):
    """The operator's process dies here: nothing it remembers survives (not an Exception, so
    no handler of the operator's takes it for an API error)."""


@dataclass(frozen=True)
class Fault:
    """What happens at one API call: `kind` is one of KINDS."""

    kind: str
    at: int  # the index of the call in the run, from 0

    # kind -> (applied first?, what is raised)
    KINDS = ("500", "409", "429", "timeout", "lease", "crash-before", "crash-after")

    def strike(self) -> tuple[bool, BaseException]:
        if self.kind == "500":
            return False, api_error(500, "Internal error: etcdserver: request timed out")
        if self.kind == "409":
            return False, api_error(
                409, "Operation cannot be fulfilled: the object has been modified"
            )
        if self.kind == "429":
            e = api_error(429, "Too many requests, please try again later.")
            e.headers = {"Retry-After": "1"}
            return False, e
        if self.kind == "timeout":
            return True, urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out.")
        if self.kind == "lease":
            return False, NotLeader("the leader Lease is held by another replica")
        return self.kind == "crash-after", Crash(self.kind)


@dataclass
class Container:
    """The TensorFlow container of one pod: started how many times in this pod, running for
    how many more ticks, and its exits (`state` / `lastState`)."""

    starts: int = 0
    left: int | None = None  # ticks until it exits on its own; None: runs until stopped
    code: int | None = None  # set while terminated
    message: str = ""
    last: tuple[int, str] | None = None
    pending: int = 0  # the code it exits with when `left` runs out


@dataclass
class Pod:
    name: str
    uid: str
    task: tuple[str, int]  # (replica type as labelled, index)
    owner: str  # its StatefulSet's uid
    revision: str
    spec_hash: str
    container: Container = field(default_factory=Container)
    deleting: bool = False
    grace: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    lost: bool = False  # its node stopped answering: the pod shows what its kubelet last said
    group: str = ""  # the PodGroup its template named (spec.schedulingGroup), if any
    # Its TensorFlow container as its template renders it (restart rules), and its finalizers.
    spec: dict[str, Any] = field(default_factory=dict)
    finalizers: list[str] = field(default_factory=list)

    @property
    def ended(self) -> bool:
        """Its container is down and its kubelet will not start it again: Succeeded/Failed."""
        code = self.container.code
        return code is not None and not kubelet_restarts(self.spec, code)

    def body(self, namespace: str) -> dict[str, Any]:
        c = self.container
        last = c.last
        if c.code is not None:
            cs = container_status(
                "terminated", exit_code=c.code, last_exit=last and last[0], restarts=c.starts - 1
            )
            cs["state"]["terminated"]["message"] = c.message
        else:
            cs = container_status("running", last_exit=last and last[0], restarts=c.starts - 1)
        if last is not None:
            cs["lastState"]["terminated"]["message"] = last[1]
        rt, _ = self.task
        meta: dict[str, Any] = {
            "name": self.name,
            "namespace": namespace,
            "uid": self.uid,
            "labels": {
                **self.labels,
                naming.LABEL_REPLICA_TYPE: rt,
                naming.LABEL_MANAGED_BY: naming.MANAGED_BY,
                naming.LABEL_REVISION: self.revision,
            },
            "annotations": {naming.ANNOTATION_SPEC_HASH: self.spec_hash},
            "ownerReferences": [{"uid": self.owner, "controller": True, "kind": "StatefulSet"}],
        }
        if self.deleting:
            meta["deletionTimestamp"] = "2026-01-01T00:00:30Z"
            meta["deletionGracePeriodSeconds"] = self.grace if self.grace is not None else 30
        if self.finalizers:
            meta["finalizers"] = list(self.finalizers)
        phase = "Running"
        if self.ended:
            phase = "Succeeded" if c.code == 0 else "Failed"
        status: dict[str, Any] = {"phase": phase, "containerStatuses": [cs]}
        if self.lost:
            # As the node controller marks it, long enough ago that runPolicy's timeout has run.
            status["conditions"] = [
                {"type": "Ready", "status": "False", "lastTransitionTime": "2000-01-01T00:00:00Z"}
            ]
        spec: dict[str, Any] = {
            "nodeName": "node-1",
            "containers": [{"name": "tensorflow", "image": "x", **self.spec}],
        }
        if self.group:
            spec["schedulingGroup"] = {"podGroupName": self.group}
        return {"metadata": meta, "spec": spec, "status": status}


@dataclass
class StatefulSet:
    name: str
    uid: str
    owner: str
    manifest: dict[str, Any]
    generation: int = 1

    @property
    def replicas(self) -> int:
        return int(self.manifest["spec"].get("replicas") or 0)

    @property
    def revision(self) -> str:
        template = json.dumps(self.manifest["spec"]["template"], sort_keys=True).encode()
        return hashlib.blake2b(template, digest_size=5).hexdigest()

    def body(self, namespace: str) -> dict[str, Any]:
        """As the watch shows it (the manifest's parts shared: the reader only reads)."""
        meta = {
            **self.manifest["metadata"],
            "namespace": namespace,
            "uid": self.uid,
            "generation": self.generation,
        }
        status = {"observedGeneration": self.generation, "updateRevision": self.revision}
        return {**self.manifest, "metadata": meta, "status": status}


# A task's script: for its n-th start (from 0, over every pod it had), ticks to run and the
# exit code (None ticks: until stopped).
Script = Callable[[int], tuple[int | None, int]]


def runs() -> Script:
    return lambda n: (None, 0)


def exits(code: int, after: int = 2, then: Script | None = None) -> Script:
    """Exits `code` after `after` ticks on its first start; then as `then` (default: the
    same again)."""
    return lambda n: (after, code) if n == 0 or then is None else then(n - 1)


@dataclass
class World:
    """The cluster's objects and controllers for one namespace."""

    namespace: str = "default"
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    sets: dict[str, StatefulSet] = field(default_factory=dict)
    services: dict[str, dict[str, Any]] = field(default_factory=dict)
    others: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    workloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, Pod] = field(default_factory=dict)
    scripts: dict[tuple[str, int], Script] = field(default_factory=dict)
    # What happened to each task: starts (from step 0 or from a save), and the pods the
    # operator deleted (by task and the pod's uid).
    starts: dict[tuple[str, int], int] = field(default_factory=dict)
    fresh_starts: dict[tuple[str, int], int] = field(default_factory=dict)
    saved: set[tuple[str, int]] = field(default_factory=set)
    deleted: list[tuple[str, int]] = field(default_factory=list)
    gone: list[dict[str, Any]] = field(default_factory=list)  # pods removed since last asked
    workloads_gone: list[dict[str, Any]] = field(default_factory=list)
    # Rules broken on the way (a StatefulSet that wants pods applied for a finished job).
    violations: list[str] = field(default_factory=list)
    # The tasks whose container exited for good (restart rules): none may start again.
    ended: set[tuple[str, int]] = field(default_factory=set)
    _ids: itertools.count[int] = field(default_factory=itertools.count)
    rv: int = 1

    def uid(self, kind: str) -> str:
        return f"{kind}-{next(self._ids)}"

    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def tick(self) -> None:
        """One step of Kubernetes: deleted pods go, StatefulSets make their missing pods,
        containers run, exit and start again."""
        for name, p in list(self.pods.items()):
            # Only its kubelet ends a pod gracefully: a lost node's goes when forced; a
            # finalizer holds it until it is taken off.
            if p.deleting and (not p.lost or p.grace == 0) and not p.finalizers:
                self._remove(name)
        for s in self.sets.values():
            rt = s.manifest["spec"]["template"]["metadata"]["labels"][naming.LABEL_REPLICA_TYPE]
            for p in list(self.pods.values()):
                if p.owner == s.uid and p.ended and not p.deleting:
                    p.deleting = True  # a pod in a terminal phase: made again once it is gone
            for i in range(s.replicas):
                name = f"{s.name}-{i}"
                if name not in self.pods:
                    self._make_pod(s, name, (rt, i))
            for p in list(self.pods.values()):
                if p.owner == s.uid and p.task[1] >= s.replicas:
                    self._stop(p)
        for p in self.pods.values():
            self._run(p)
        for w in self.workloads.values():
            self._admit(w)

    def _admit(self, w: dict[str, Any]) -> None:
        """Kueue's scheduler: an active Workload without a reservation gets one (every pod set
        on flavor "default"), and a past eviction is marked over, as `SetQuotaReservation`
        does."""
        status = w.setdefault("status", {})
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        if status.get("admission") or w["spec"].get("active") is False or "Finished" in conditions:
            return
        for kind in ("QuotaReserved", "Admitted"):
            conditions[kind] = cond(kind, True, "QuotaReserved")
        if "Evicted" in conditions:
            conditions["Evicted"] = cond("Evicted", False, "QuotaReserved")
        status["conditions"] = list(conditions.values())
        status["admission"] = {
            "clusterQueue": "cq",
            "podSetAssignments": [
                {"name": p["name"], "flavors": {"cpu": "default"}, "count": p["count"]}
                for p in w["spec"]["podSets"]
            ],
        }
        w["metadata"]["resourceVersion"] = self.next_rv()

    def evict(self) -> None:
        """Kueue preempts every admitted Workload (to fit another ClusterQueue's)."""
        for w in self.workloads.values():
            status = w.get("status") or {}
            if not status.get("admission"):
                continue
            conditions = {c["type"]: c for c in status.get("conditions") or []}
            conditions["Evicted"] = cond("Evicted", True, "Preempted")
            status["conditions"] = list(conditions.values())
            w["metadata"]["resourceVersion"] = self.next_rv()

    def _lose_parameter_server(self) -> None:
        """A parameter server gone: the chief's coordinator loses its variables and exits 1,
        as TensorFlow's does, unless it is stopping already."""
        for p in self.pods.values():
            if p.task[0] == "chief" and not p.deleting and p.container.code is None:
                p.container.code, p.container.message = 1, "UnavailableError: ps lost"

    def _make_pod(self, s: StatefulSet, name: str, task: tuple[str, int]) -> None:
        annotations = s.manifest["spec"]["template"]["metadata"].get("annotations") or {}
        spec_hash = annotations.get(naming.ANNOTATION_SPEC_HASH, "")
        labels = dict(s.manifest["spec"]["template"]["metadata"].get("labels") or {})
        template = s.manifest["spec"]["template"]
        group = template["spec"].get("schedulingGroup") or {}
        p = Pod(name, self.uid("pod"), task, s.uid, s.revision, spec_hash, labels=labels)
        p.group = group.get("podGroupName", "")
        (tf,) = template["spec"]["containers"]
        p.spec = {k: tf[k] for k in ("restartPolicy", "restartPolicyRules") if k in tf}
        p.finalizers = list(template["metadata"].get("finalizers") or [])
        self.pods[name] = p
        self._start(p)

    def _start(self, p: Pod) -> None:
        c = p.container
        if p.task in self.ended:
            self.violations.append(f"{p.task} started again after its task ended")
        n = self.starts.get(p.task, 0)
        self.starts[p.task] = n + 1
        if p.task not in self.saved:
            self.fresh_starts[p.task] = self.fresh_starts.get(p.task, 0) + 1
        self.saved.discard(p.task)
        script = self.scripts.get(p.task, runs())
        c.left, code = script(n)
        c.starts += 1
        c.pending = code

    def _run(self, p: Pod) -> None:
        c = p.container
        if p.deleting or p.lost:
            return
        if p.ended:
            return
        if c.code is not None:  # restarted by the kubelet
            c.last, c.code, c.message = (c.code, c.message), None, ""
            self._start(p)
            return
        if c.left is None:
            return
        c.left -= 1
        if c.left <= 0:
            c.code = c.pending
            if p.ended:
                self.ended.add(p.task)

    def _stop(self, p: Pod, grace: int | None = None) -> None:
        """SIGTERM: a running container saves and exits EXIT_STOPPED."""
        if p.deleting:
            if grace is not None:
                p.grace = min(grace, p.grace if p.grace is not None else grace)
            return
        p.deleting, p.grace = True, grace
        c = p.container
        if c.code is None and not p.lost:  # a lost node's containers hear nothing
            c.code, c.message = stop.EXIT_STOPPED, stop.message(7)
            self.saved.add(p.task)

    def lose(self, name: str) -> None:
        """The node of pod `name` stops answering: its container is frozen running, as its
        kubelet last reported it, and the pod goes only when deleted with no grace."""
        p = self.pods[name]
        p.lost = True

    def _remove(self, name: str) -> None:
        p = self.pods.pop(name)
        self.gone.append(p.body(self.namespace))
        if p.task[0] == "ps":
            self._lose_parameter_server()

    def collect(self, job_uid: str) -> None:
        """The garbage collector: a deleted TFJob's children go, their pods with them."""
        for name, s in list(self.sets.items()):
            if s.owner == job_uid:
                del self.sets[name]
                for p in list(self.pods.values()):
                    if p.owner == s.uid:
                        self._stop(p)
        for name, svc in list(self.services.items()):
            if svc["owner"] == job_uid:
                del self.services[name]
        for name, w in list(self.workloads.items()):
            if any(o["uid"] == job_uid for o in w["metadata"].get("ownerReferences") or []):
                self.workloads_gone.append(self.workloads.pop(name))

    def delete_pod(self, name: str, uid: str, grace: int | None) -> None:
        p = self.pods.get(name)
        if p is None or p.uid != uid:
            return
        if not p.deleting:
            self.deleted.append(p.task)
        self._stop(p, grace)
        if grace == 0:  # forced: the API server removes it at once, whatever its kubelet does
            self._remove(name)


@dataclass
class SimKube:
    """`controller.client.Kube` on a `World`: every call recorded (method, target), any one
    of them failed by the `fault`."""

    world: World
    fault: Fault | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)
    group: str = GROUP
    leading: bool = True
    struck: bool = False

    def may_write(self) -> bool:
        return self.leading

    def _call(self, method: str, target: str, act: Callable[[], Any]) -> Any:
        i = len(self.calls)
        self.calls.append((method, target))
        if self.fault is None or self.fault.at != i:
            return act()
        self.struck = True
        applied, error = self.fault.strike()
        if self.fault.kind == "lease":
            self.leading = False
        if applied:
            act()
        raise error

    # -- the job
    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        def act() -> dict[str, Any]:
            stored = self.world.jobs.get(name)
            if stored is None:
                raise api_error(404, "not found")
            stored["status"] = merge(stored.get("status"), patch)
            stored["metadata"]["resourceVersion"] = self.world.next_rv()
            return copy.deepcopy(stored)

        return self._call("patch_status", name, act)

    def patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        def act() -> None:
            stored = self.world.jobs[name]
            stored["metadata"] = merge(stored["metadata"], patch["metadata"])
            stored["metadata"]["resourceVersion"] = self.world.next_rv()

        self._call("patch_job", name, act)

    def delete_job(self, namespace: str, name: str) -> None:
        def act() -> None:
            job = self.world.jobs.pop(name, None)
            if job is not None:
                self.world.collect(job["metadata"]["uid"])

        self._call("delete_job", name, act)

    # -- children
    def apply(
        self,
        manifest: dict[str, Any],
        fresh: bool = False,
        changed: bool = True,
        check: bool = False,
    ) -> int | None:
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        # Whose it is (`Kube._check_whose`): unless a fresh job's create made it.
        exists = name in self.world.sets or name in self.world.services
        if check and kind != "PersistentVolumeClaim" and (exists or not fresh):
            self._call("get", f"{kind}/{name}", lambda: None)

        def act() -> int | None:
            owner = manifest["metadata"]["ownerReferences"][0]["uid"]
            job = next((j for j in self.world.jobs.values() if j["metadata"]["uid"] == owner), {})
            if (
                kind == "StatefulSet"
                and manifest["spec"].get("replicas")
                and st.is_finished(job.get("status") or {})
            ):
                self.world.violations.append(f"{name} applied with pods for a finished job")
            if kind == "StatefulSet":
                s = self.world.sets.get(name)
                if s is None:
                    s = StatefulSet(name, self.world.uid("sts"), owner, copy.deepcopy(manifest))
                    self.world.sets[name] = s
                elif s.manifest["spec"] != manifest["spec"]:
                    s.manifest = copy.deepcopy(manifest)
                    s.generation += 1
                return s.generation
            if kind == "Service":
                self.world.services[name] = {"owner": owner}
            else:
                self.world.others[(kind, name)] = copy.deepcopy(manifest)
            return None

        return self._call("apply", f"{kind}/{name}", act)

    def scale_to_zero(self, namespace: str, name: str) -> None:
        def act() -> None:
            s = self.world.sets.get(name)
            if s is not None and s.replicas:
                s.manifest["spec"]["replicas"] = 0
                s.generation += 1

        self._call("scale_to_zero", name, act)

    def delete_child(self, kind: str, namespace: str, name: str) -> None:
        def act() -> None:
            if kind == "StatefulSet":
                s = self.world.sets.pop(name, None)
                for p in list(self.world.pods.values()):
                    if s is not None and p.owner == s.uid:
                        self.world._stop(p)
            elif kind == "Service":
                self.world.services.pop(name, None)
            else:
                self.world.others.pop((kind, name), None)

        self._call("delete_child", f"{kind}/{name}", act)

    # -- pods
    def delete_pod(self, namespace: str, name: str, uid: str, grace: int | None = None) -> None:
        self._call("delete_pod", name, lambda: self.world.delete_pod(name, uid, grace))

    def force_delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self._call("force_delete_pod", name, lambda: self.world.delete_pod(name, uid, 0))

    def release_pod(self, namespace: str, name: str, uid: str) -> None:
        def act() -> None:
            p = self.world.pods.get(name)
            if p is not None and p.uid == uid:
                p.finalizers = [f for f in p.finalizers if f != naming.finalizer(self.group)]

        self._call("release_pod", name, act)

    def label_pod(self, namespace: str, name: str, uid: str, labels: dict[str, str]) -> None:
        def act() -> None:
            p = self.world.pods.get(name)
            if p is not None and p.uid == uid:
                p.labels.update(labels)

        self._call("label_pod", name, act)

    # -- Kueue
    def workload_version(self) -> str:
        return self._call("workload_version", "", lambda: "v1beta2")

    def get_cluster_object(self, group: str, version: str, plural: str, name: str) -> Any:
        flavor = {"metadata": {"name": name}, "spec": {}}
        return self._call("get", f"{plural}/{name}", lambda: flavor)

    def list_cluster_objects(self, group: str, version: str, plural: str) -> list[Any]:
        return self._call("list", plural, list)

    def create_workload(self, manifest: dict[str, Any]) -> None:
        def act() -> None:
            name = manifest["metadata"]["name"]
            if name in self.world.workloads:
                return  # 409: kept, as the client does
            body = copy.deepcopy(manifest)
            body["metadata"].update(uid=self.world.uid("wl"), resourceVersion=self.world.next_rv())
            self.world.workloads[name] = body

        self._call("create_workload", manifest["metadata"]["name"], act)

    def delete_workload(self, version: str, namespace: str, name: str) -> None:
        def act() -> None:
            gone = self.world.workloads.pop(name, None)
            if gone is not None:
                self.world.workloads_gone.append(gone)

        self._call("delete_workload", name, act)

    def patch_workload(self, version: str, namespace: str, name: str, patch: Any) -> None:
        self._call("patch_workload", name, lambda: self._patch_workload(name, patch))

    def patch_workload_status(self, version: str, namespace: str, name: str, patch: Any) -> None:
        self._call("patch_workload_status", name, lambda: self._patch_workload(name, patch))

    def _patch_workload(self, name: str, patch: dict[str, Any]) -> None:
        """A merge patch that names the resourceVersion it was computed from."""
        stored = self.world.workloads.get(name)
        if stored is None:
            return  # gone meanwhile: the client needs none
        rv = (patch.get("metadata") or {}).get("resourceVersion")
        if rv is not None and rv != stored["metadata"]["resourceVersion"]:
            raise api_error(409, "the object has been modified")
        self.world.workloads[name] = merge(stored, patch)
        self.world.workloads[name]["metadata"]["resourceVersion"] = self.world.next_rv()

    # -- reads
    def failed_creates(self, namespace: str) -> dict[tuple[str, str], str]:
        return self._call("failed_creates", namespace, dict)

    def foreign_children(self, namespace: str, job: str, uid: str) -> list[str]:
        return self._call("foreign_children", job, list)
