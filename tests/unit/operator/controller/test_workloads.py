"""The reconciler's side of Kueue: the priority a job that names no class gets (the cluster's
global default PriorityClass, listed at most once a CLUSTER_READ_SECONDS), and a Workload
updated in place (a merge patch; a conflict is looked at again)."""

from __future__ import annotations

import asyncio
from typing import Any

import kubernetes
import pytest

from tfjob_operator.controller.jobstate import JobState
from tfjob_operator.controller.workloads import (
    CLUSTER_READ_SECONDS,
    WORKLOAD_CONFLICT_SECONDS,
    Workloads,
)
from tfjob_operator.rules import kueue
from tfjob_operator.rules.kueue.admission import observe_workload
from tfjob_operator.rules.kueue.queue import Priority, Queueing, QueueView, global_default
from tfjob_operator.rules.kueue.workload import WorkloadDecision
from tfjob_operator.rules.lifecycle import JobView
from tfjob_testbed.core.jobs import tfjob


def pc(name: str, value: int, default: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name}, "value": value, "globalDefault": default}


@pytest.mark.parametrize(
    ("classes", "expected"),
    [
        ([], None),
        ([pc("high", 1000)], None),
        ([pc("high", 1000), pc("normal", 10, True)], Priority("scheduling.k8s.io", "normal", 10)),
        # two defaults (a race): Kueue takes the lowest
        ([pc("a", 50, True), pc("b", 5, True)], Priority("scheduling.k8s.io", "b", 5)),
    ],
)
def test_the_global_default_priority_class(classes, expected):
    assert global_default(classes) == expected


class Kube:
    def __init__(self) -> None:
        self.classes = [pc("normal", 10, True)]
        self.calls: list[tuple[Any, ...]] = []
        self.error: Exception | None = None

    def workload_version(self) -> str:
        return "v1beta2"

    def list_cluster_objects(self, group: str, version: str, plural: str) -> list[Any]:
        self.calls.append(("list", group, version, plural))
        return self.classes

    def get_cluster_object(self, group: str, version: str, plural: str, name: str) -> Any:
        self.calls.append(("get", group, plural, name))
        return {"value": 7}

    def patch_workload(self, version: str, namespace: str, name: str, patch: Any) -> None:
        self.calls.append(("patch_workload", version, namespace, name, patch))
        if self.error is not None:
            raise self.error

    def patch_workload_status(self, version: str, namespace: str, name: str, patch: Any) -> None:
        self.calls.append(("patch_workload_status", version, namespace, name, patch))


def test_a_job_naming_no_class_gets_the_global_default_read_once_a_while():
    """Read afresh for a Workload about to be made (a class made a moment ago counts, as in
    Kueue); for one that exists, at most once a CLUSTER_READ_SECONDS."""
    kube, now = Kube(), [0.0]
    wls = Workloads(kube, lambda: now[0], Queueing())  # type: ignore[arg-type]
    body = tfjob(name="mnist", replicas={"Worker": 1})
    body["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team-a"}
    body["metadata"]["uid"] = "uid-1"
    view = JobView.from_body(body)
    name = kueue.workload_name("mnist", "uid-1")
    made = JobState()
    made.workloads[name] = observe_workload({"metadata": {"name": name}})

    def priority(job: JobState) -> Priority | None:
        q = asyncio.run(wls.queue_view(job, ("default", "mnist"), body, view))
        assert q is not None
        return q.priority

    assert priority(made) == Priority("scheduling.k8s.io", "normal", 10)
    kube.classes = []
    now[0] += CLUSTER_READ_SECONDS / 2
    assert priority(made) == Priority("scheduling.k8s.io", "normal", 10), "cached"
    assert priority(JobState()) is None, "read afresh for a Workload about to be made"
    kube.classes = [pc("normal", 10, True)]
    now[0] += CLUSTER_READ_SECONDS
    assert priority(made) == Priority("scheduling.k8s.io", "normal", 10)
    assert [c[0] for c in kube.calls] == ["list", "list", "list"]

    body["metadata"]["labels"][kueue.PRIORITY_LABEL] = "urgent"
    assert priority(made) == Priority(kueue.GROUP, "urgent", 7), "a named class is read instead"


def test_an_update_is_a_patch_of_the_workload_and_a_conflict_is_retried():
    kube = Kube()
    wls = Workloads(kube, lambda: 0.0, Queueing())  # type: ignore[arg-type]
    job = JobState()
    observed = observe_workload({"metadata": {"name": "tfjob-mnist-1", "resourceVersion": "3"}})
    job.queue = QueueView("team-a", "v1beta2", observed)
    patch = {"metadata": {"resourceVersion": "3"}, "spec": {"active": False}}
    decision = WorkloadDecision(update=patch)
    assert asyncio.run(wls.apply(job, ("ns", "mnist"), "v1beta2", decision)) is None
    assert kube.calls == [("patch_workload", "v1beta2", "ns", "tfjob-mnist-1", patch)]
    kube.error = kubernetes.client.ApiException(status=409)
    delay = asyncio.run(wls.apply(job, ("ns", "mnist"), "v1beta2", decision))
    assert delay == WORKLOAD_CONFLICT_SECONDS
