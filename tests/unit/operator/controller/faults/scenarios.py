"""The lives of a job the fault explorer runs: each a TFJob, its tasks' scripts and the user's
edits, by tick."""

from __future__ import annotations

import dataclasses
from typing import Any

from tests.unit.operator.controller.faults.explorer import Scenario
from tests.unit.operator.controller.faults.sim import exits
from tfjob_operator.rules import kueue
from tfjob_operator.rules.gang import Gang, Scheduler
from tfjob_testbed.core.jobs import tfjob

PS_CHIEF = {"PS": 1, "Chief": 1, "Worker": 2}


def _job(replicas: dict[str, int], **kwargs: Any) -> dict[str, Any]:
    return tfjob("life", replicas=replicas, **kwargs)


def _queued(job: dict[str, Any]) -> dict[str, Any]:
    job["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team-a"}
    return job


def _set(path: str, value: Any) -> Any:
    """An edit of the spec: `path` is dotted ("tfReplicaSpecs.Worker.replicas")."""

    def edit(spec: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = spec
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value

    return edit


def _env(rt: str, value: str) -> Any:
    """An edit of one replica type's pod template: a new env var."""

    def edit(spec: dict[str, Any]) -> None:
        container = spec["tfReplicaSpecs"][rt]["template"]["spec"]["containers"][0]
        container["env"] = [{"name": "EDITED", "value": value}]

    return edit


# Two workers become three, then worker 0 ends the job.
RESIZE = Scenario(
    "resize",
    _job({"Worker": 2}),
    {("worker", 0): exits(0, after=6, then=lambda n: (3, 0))},
    edits={2: _set("tfReplicaSpecs.Worker.replicas", 3)},
    ticks=14,
)

SCENARIOS = [
    # The chief's exit 0 ends the job; the rest of the cluster is cleaned up.
    Scenario("chief-succeeds", _job(PS_CHIEF), {("chief", 0): exits(0, after=3)}),
    Scenario(
        "chief-succeeds-clean-all",
        _job(PS_CHIEF, run_policy={"cleanPodPolicy": "All"}),
        {("chief", 0): exits(0, after=3)},
    ),
    Scenario(
        "chief-succeeds-clean-none",
        _job(PS_CHIEF, run_policy={"cleanPodPolicy": "None"}),
        {("chief", 0): exits(0, after=3)},
    ),
    # successPolicy AllWorkers: every worker's exit 0, at different moments.
    Scenario(
        "all-workers-succeed",
        _job({"Worker": 2}, successPolicy="AllWorkers"),
        {("worker", 0): exits(0, after=2), ("worker", 1): exits(0, after=4)},
    ),
    # A permanent failure under restartPolicy Never.
    Scenario(
        "worker-fails",
        _job({"PS": 1, "Worker": 2}),
        {("worker", 1): exits(1, after=2)},
        expect="Failed",
    ),
    # ExitCode: a retryable exit, again and again, past backoffLimit.
    Scenario(
        "retries-to-backoff-limit",
        _job({"Worker": 1}, restart_policy="ExitCode", run_policy={"backoffLimit": 2}),
        {("worker", 0): exits(137, after=1)},
        ticks=14,
        expect="Failed",
    ),
    # Suspended while it runs, resumed, then it succeeds.
    Scenario(
        "suspend-and-resume",
        _job({"Worker": 2}),
        {("worker", 0): exits(0, after=3, then=lambda n: (3, 0))},
        edits={2: _set("runPolicy.suspend", True), 5: _set("runPolicy.suspend", False)},
        ticks=14,
    ),
    RESIZE,
    # The same as a gang of Kubernetes' own: the Workload and PodGroup made before the pods,
    # their minCount following the resize, every pod in the group.
    dataclasses.replace(RESIZE, name="gang-resize", gang=Gang(Scheduler.KUBERNETES)),
    # A worker-only template edit: every task restarts together, then the chief ends it.
    Scenario(
        "worker-template-edit",
        _job(PS_CHIEF),
        {("chief", 0): exits(0, after=6, then=lambda n: (3, 0))},
        edits={2: _env("Worker", "1")},
        ticks=14,
    ),
    # A parameter-server-only template edit: the PS cannot restart alone (the chief's
    # coordinator would lose its variables), so the whole job restarts, as a stop on purpose.
    Scenario(
        "ps-template-edit",
        _job(PS_CHIEF),
        {("chief", 0): exits(0, after=6, then=lambda n: (3, 0))},
        edits={2: _env("PS", "1")},
        ticks=14,
    ),
    # A typo in an edit of a running job, fixed by the next edit: nothing of it goes.
    Scenario(
        "invalid-edit-then-fixed",
        _job(PS_CHIEF),
        {("chief", 0): exits(0, after=7)},
        edits={
            2: _set("tfReplicaSpecs.Chief.replicas", 2),  # at most 1 Chief
            4: _set("tfReplicaSpecs.Chief.replicas", 1),
        },
        ticks=14,
    ),
    # Queued in Kueue, admitted, preempted while it runs (its pods stop, the quota is given
    # back), admitted again; then the chief, back from its save, ends the job.
    Scenario(
        "kueue-evicts",
        _queued(_job(PS_CHIEF)),
        {("chief", 0): exits(0, after=5, then=lambda n: (3, 0))},
        edits={3: "evict"},
        ticks=16,
    ),
    # A worker's node stops answering: past nodeLostTimeoutSeconds its pod is deleted with no
    # grace, counted as one failure restart, and made again; then the chief ends the job.
    Scenario(
        "node-lost",
        _job(PS_CHIEF, restart_policy="OnFailure", run_policy={"nodeLostTimeoutSeconds": 60}),
        {("chief", 0): exits(0, after=6)},
        edits={2: "lose life-worker-1"},
        ticks=14,
    ),
    # The TFJob goes as soon as it has finished (ttlSecondsAfterFinished: 0).
    Scenario(
        "ttl-after-finish",
        _job({"Worker": 1}, run_policy={"ttlSecondsAfterFinished": 0}),
        {("worker", 0): exits(0, after=2)},
        expect="Deleted",
    ),
    # Deleted and made again under the same name while the first one's children linger.
    Scenario(
        "deleted-and-made-again",
        _job({"Worker": 1}),
        {("worker", 0): exits(0, after=5, then=lambda n: (3, 0))},
        edits={2: "remake"},
        ticks=14,
    ),
]

# Where the API server keeps container restart rules: an exit that ends a task keeps its
# container down, its pod Succeeded or Failed, held by the operator's finalizer while its
# StatefulSet would make it again; a task started again after that is a violation.
RULES = {
    "chief-succeeds",
    "chief-succeeds-clean-all",
    "chief-succeeds-clean-none",
    "all-workers-succeed",
    "worker-fails",
    "retries-to-backoff-limit",
    "resize",
    "ttl-after-finish",
    "deleted-and-made-again",
}
SCENARIOS.append(
    # A finished job that keeps its pods (cleanPodPolicy None), deleted: its chief's done pod,
    # held, is let go as its StatefulSets are scaled to 0, before the garbage collector comes.
    Scenario(
        "deleted-clean-none-rules",
        _job(PS_CHIEF, run_policy={"cleanPodPolicy": "None"}),
        {("chief", 0): exits(0, after=3)},
        edits={6: "delete", 8: "collect"},
        ticks=10,
        expect="Deleted",
        rules=True,
    )
)
SCENARIOS += [
    dataclasses.replace(s, name=f"{s.name}-rules", rules=True) for s in SCENARIOS if s.name in RULES
]
