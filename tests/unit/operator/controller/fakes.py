"""The reconciler on a fake client: a `FakeKube` that keeps the TFJobs as the API server stores
them and records every call, and a `Cluster` that wires a `Reconciler` to it, with kopf's
indexes as plain dicts and a clock of its own (the `cluster` fixture, in ../conftest.py)."""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import replace
from typing import Any

import kubernetes

from tfjob_operator.api.spec import GROUP, ReplicaType
from tfjob_operator.controller.jobstate import JobKey
from tfjob_operator.controller.projections import job_record
from tfjob_operator.controller.reconcile import Reconciler
from tfjob_operator.rules import naming
from tfjob_operator.rules.pods import observe
from tfjob_operator.rules.statefulsets import StatefulSetObservation
from tfjob_testbed.core.jobs import pod, tfjob

WORKER = ReplicaType.WORKER


def api_error(status: int, message: str = "boom") -> kubernetes.client.ApiException:
    """An API error as the kubernetes client raises it, with the server's message."""
    e = kubernetes.client.ApiException(status=status, reason="Reason")
    e.body = json.dumps({"kind": "Status", "message": message})
    return e


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies a merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge(out.get(k), v)
    return out


class FakeKube:
    """Stands in for `controller.client.Kube`: keeps TFJobs as the API server stores them and
    records every call the reconciler makes, in order."""

    def __init__(self) -> None:
        self.stored: dict[JobKey, dict[str, Any]] = {}
        self.calls: list[tuple[Any, ...]] = []
        # FailedCreate messages by namespace, as `Kube.failed_creates` returns them.
        self.failed: dict[str, dict[tuple[str, str], str]] = {}
        self.errors: dict[str, Exception] = {}  # method -> what it raises
        self.leading: list[bool] = []  # answers of may_write, oldest first; then True
        self.foreign: dict[JobKey, list[str]] = {}  # another controller's children, by job
        self.group = GROUP
        # Each StatefulSet's generation as an apply leaves it, by name (default 1).
        self.generations: dict[str, int] = {}
        self.how: list[tuple[str, bool, bool]] = []  # (child, `fresh`, `changed`) per apply
        self.applied: dict[tuple[str, str], dict[str, Any]] = {}  # (kind, name) -> the last
        self._rv = 1

    def next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _call(self, *call: Any) -> None:
        self.calls.append(call)
        error = self.errors.get(call[0])
        if error is not None:
            raise error

    def may_write(self) -> bool:
        return self.leading.pop(0) if self.leading else True

    def apply(
        self,
        manifest: dict[str, Any],
        fresh: bool = False,
        changed: bool = True,
        check: bool = False,
    ) -> int | None:
        name = manifest["metadata"]["name"]
        self._call("apply", manifest["kind"], name)
        self.how.append((name, fresh, changed))
        self.applied[(manifest["kind"], name)] = copy.deepcopy(manifest)
        return self.generations.get(name, 1) if manifest["kind"] == "StatefulSet" else None

    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self._call("patch_status", namespace, name, copy.deepcopy(patch))
        stored = self.stored[(namespace, name)]
        stored["status"] = merge(stored.get("status"), patch)
        stored["metadata"]["resourceVersion"] = self.next_rv()
        return copy.deepcopy(stored)

    def failed_creates(self, namespace: str) -> dict[tuple[str, str], str]:
        self._call("failed_creates", namespace)
        return dict(self.failed.get(namespace, {}))

    def scale_to_zero(self, namespace: str, name: str) -> None:
        self._call("scale_to_zero", namespace, name)

    def delete_child(self, kind: str, namespace: str, name: str) -> None:
        self._call("delete_child", kind, namespace, name)

    def delete_job(self, namespace: str, name: str) -> None:
        self._call("delete_job", namespace, name)

    def patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self._call("patch_job", namespace, name, copy.deepcopy(patch))
        stored = self.stored[(namespace, name)]
        stored["metadata"] = merge(stored["metadata"], patch["metadata"])
        stored["metadata"]["resourceVersion"] = self.next_rv()

    def delete_pod(self, namespace: str, name: str, uid: str, grace: int | None = None) -> None:
        self._call("delete_pod", namespace, name, uid, *(() if grace is None else (grace,)))

    def label_pod(self, namespace: str, name: str, uid: str, labels: dict[str, str]) -> None:
        self._call("label_pod", namespace, name, dict(labels))

    def workload_version(self) -> str | None:
        return None  # no Kueue

    def foreign_children(self, namespace: str, job: str, uid: str) -> list[str]:
        self._call("foreign_children", namespace, job)
        return list(self.foreign.get((namespace, job), []))


class Cluster:
    """A reconciler wired to a fake API server, plain-dict indexes and a clock of its own."""

    def __init__(self) -> None:
        self.kube = FakeKube()
        self.now = 1000.0
        self.jobs: dict[JobKey, list[dict[str, Any]]] = {}
        self.pods: dict[JobKey, list[Any]] = {}
        self.sets: dict[JobKey, list[StatefulSetObservation]] = {}
        self.events: list[tuple[str, str]] = []  # (job name, reason)
        self.reconciler = Reconciler(
            self.kube,  # type: ignore[arg-type]
            "cluster.local",
            jobs=self.jobs,
            pods=self.pods,
            statefulsets=self.sets,
            clock=lambda: self.now,
        )
        self.loop = asyncio.new_event_loop()

    def close(self) -> None:
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()

    def create(
        self, name: str, namespace: str = "default", api_version: str = "", **spec: Any
    ) -> JobKey:
        key = (namespace, name)
        body = tfjob(name, namespace, uid=f"uid-{namespace}-{name}", **spec)
        body["apiVersion"] = api_version or body["apiVersion"]
        body["metadata"].update(generation=1, resourceVersion=self.kube.next_rv())
        self.kube.stored[key] = body
        self.deliver(key)
        return key

    def deliver(self, key: JobKey) -> None:
        """The watch brings the stored object into the index."""
        self.jobs[key] = [job_record(copy.deepcopy(self.kube.stored[key]))]

    def delete(self, key: JobKey) -> None:
        del self.kube.stored[key]
        del self.jobs[key]

    def running(self, key: JobKey, *indexes: int) -> None:
        """The job's workers with these indexes are up (and no other pod is)."""
        self.pods[key] = [observe(pod(key[1], "worker", i, namespace=key[0])) for i in indexes]

    def lacking_workers(self, key: JobKey, replicas: int) -> StatefulSetObservation:
        """The job's worker StatefulSet exists and wants `replicas` pods."""
        sts = StatefulSetObservation(naming.replica_name(key[1], WORKER), f"sts-{key[1]}", replicas)
        self.sets[key] = [sts]
        return sts

    def reconcile(self, key: JobKey, *, deliver: bool = True) -> float | None:
        """One reconcile; then, unless told otherwise, the watch delivers what it wrote. The
        StatefulSets a test names with no owner are the job's (the operator made them)."""
        stored = self.kube.stored.get(key)
        if stored is not None and key in self.sets:
            uid = stored["metadata"]["uid"]
            self.sets[key] = [s if s.owner else replace(s, owner=uid) for s in self.sets[key]]
        delay = self.loop.run_until_complete(self.reconciler(key))
        if deliver and key in self.kube.stored:
            self.deliver(key)
        return delay

    def writes(self, key: JobKey | None = None) -> list[dict[str, Any]]:
        """The status patches sent, of one job or of all."""
        return [c[3] for c in self.kube.calls if c[0] == "patch_status" and key in (None, c[1:3])]

    def calls(self, method: str) -> list[tuple[Any, ...]]:
        return [c for c in self.kube.calls if c[0] == method]

    def status(self, key: JobKey) -> dict[str, Any]:
        return self.kube.stored[key].get("status") or {}

    def reasons(self, name: str | None = None) -> list[str]:
        return [reason for job, reason in self.events if name in (None, job)]
