"""The operator's pods SIGKILLed at random moments through a sequence of real jobs, and each job
ends as its twin did, run first with nothing killed.

The lives: a success by the chief under each cleanPodPolicy, one by every worker
(`successPolicy: AllWorkers`), a permanent failure, retries up to `backoffLimit`, a suspend and
resume, a resize, a parameter server's template edited, a TTL of 0. Each runs twice: once
undisturbed (its twin), then again while a killer SIGKILLs the operator (its leader, or both
replicas at once) through containerd, as the kernel's OOM killer would, and deletes the dead pod
so that its ReplicaSet makes a fresh one. The moments are drawn from a seeded generator, the
seed printed (`TFJOB_KILL_SEED` runs it again).

For each job the two runs must agree: its end (conditions and their reasons, the failure, the
restarts counted), each chief run (how many, how many trained from step 0) and the step the
last one ended at, the exact target for a success. Each pass prints one `KILLS` line for the
table of docs/faults.md."""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.node.cluster_reads import (
    FAST,
    LEASE_DURATION,
    POD_WAIT,
    RESTORED,
    STEP,
    TRAIN_WAIT,
    FollowedLog,
    container,
    fast_job,
    holder_pod,
    is_true,
    job_pods,
    leader,
    lease_holder,
    newest_step,
    operator_pods,
    pod,
)
from tfjob_testbed.core.jobs import example
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.nodes.node import Node
from tfjob_testbed.operator_cluster import NAMESPACE, OperatorCluster

pytestmark = pytest.mark.node
SEED = int(os.environ.get("TFJOB_KILL_SEED") or random.SystemRandom().randrange(1, 2**31))
# Seconds from a leader's start of work to the next kill, drawn uniformly.
KILL_AFTER = (0.5, 12.0)
# Of the kills, the share that takes both replicas at once (no standby to take over).
BOTH = 0.3
# Long enough that an edit made at step EDIT_AT meets a chief still training, however long the
# operator is away (a Lease's duration and a pod's start).
LONG = 1500
EDIT_AT = 100
LIVES_AT_ONCE = 3


@dataclass(frozen=True)
class Life:
    """One job: its manifest, what the user does while it runs, how it must end."""

    name: str
    make: Callable[[str], dict[str, Any]]
    act: Callable[[OperatorCluster, str, str, ChiefRuns], None] | None = None
    want: str = "Succeeded"  # or "Failed", or "Deleted" (its TTL)
    target: int | None = 300  # the step a success ends at


def _ps(name: str, *more: str, **run_policy: Any) -> dict[str, Any]:
    job = fast_job(name, "mnist-ps", *more)
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1
    job["spec"].setdefault("runPolicy", {}).update(run_policy)
    return job


def _worker_exits(name: str, code: int, policy: str, backoff: int) -> dict[str, Any]:
    """One worker, no TensorFlow: it exits `code` 20 s into each start (longer than the
    operator is away at a kill, so that no exit goes unseen before the next)."""
    job = _ps(name, backoffLimit=backoff)
    specs = job["spec"]["tfReplicaSpecs"]
    del specs["Chief"], specs["PS"]
    specs["Worker"]["restartPolicy"] = policy
    specs["Worker"]["template"]["spec"]["containers"][0].update(
        command=["python", "-c", f"import sys, time; time.sleep(20); sys.exit({code})"], args=[]
    )
    return job


def _all_workers(name: str) -> dict[str, Any]:
    """Two MultiWorkerMirrored workers; the job succeeds once both have (`AllWorkers`)."""
    job = example("mnist-sync", name, FAST)
    job["spec"]["successPolicy"] = "AllWorkers"
    return job


def _patch(cluster: OperatorCluster, namespace: str, name: str, spec: dict[str, Any]) -> None:
    cluster.kubectl("patch", "tfjob", name, "-n", namespace, "--type=merge",
                    "-p", json.dumps({"spec": spec}))  # fmt: skip


def _when_training(act: Callable[[OperatorCluster, str, str], None]):
    """`act` once the job's chief has trained EDIT_AT steps."""

    def at(cluster: OperatorCluster, namespace: str, name: str, runs: ChiefRuns) -> None:
        runs.wait_step(f"{name}-chief-0", EDIT_AT)
        act(cluster, namespace, name)

    return at


def _suspend_and_resume(cluster: OperatorCluster, namespace: str, name: str) -> None:
    _patch(cluster, namespace, name, {"runPolicy": {"suspend": True}})
    wait_for(
        lambda: (
            is_true(cluster.tfjob_status(name, namespace), "Suspended")
            and not job_pods(cluster, namespace, name)
        ),
        POD_WAIT,
        f"{name} suspended, its pods gone",
    )
    _patch(cluster, namespace, name, {"runPolicy": {"suspend": False}})


def _one_worker(cluster: OperatorCluster, namespace: str, name: str) -> None:
    _patch(cluster, namespace, name, {"tfReplicaSpecs": {"Worker": {"replicas": 1}}})


def _ps_edited(cluster: OperatorCluster, namespace: str, name: str) -> None:
    env = [{"name": "EDITED", "value": "1"}]
    path = "/spec/tfReplicaSpecs/PS/template/spec/containers/0/env"
    cluster.kubectl("patch", "tfjob", name, "-n", namespace, "--type=json",
                    "-p", json.dumps([{"op": "add", "path": path, "value": env}]))  # fmt: skip


def _resized(name: str) -> dict[str, Any]:
    job = _ps(name, f"--steps={LONG}")
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
    return job


# The longest first, so that the short ones run beside them.
LIVES = [
    Life(
        "susp",
        lambda n: _ps(n, f"--steps={LONG}"),
        _when_training(_suspend_and_resume),
        target=LONG,
    ),
    Life("resize", _resized, _when_training(_one_worker), target=LONG),
    Life("psedit", lambda n: _ps(n, f"--steps={LONG}"), _when_training(_ps_edited), target=LONG),
    Life("ok", lambda n: _ps(n)),
    Life("all", lambda n: _ps(n, cleanPodPolicy="All")),
    Life("none", lambda n: _ps(n, cleanPodPolicy="None")),
    Life("allw", _all_workers),
    Life("fail", lambda n: _worker_exits(n, 3, "Never", 3), want="Failed", target=None),
    Life("retry", lambda n: _worker_exits(n, 137, "ExitCode", 1), want="Failed", target=None),
    Life("ttl", lambda n: _ps(n, ttlSecondsAfterFinished=0), want="Deleted"),
]
SMOKE = [LIVES[3]]


@dataclass
class ChiefRuns:
    """Every run of the chiefs' containers (worker 0's where a job has no chief), each followed
    from its start: the pods of the namespace polled, a `kubectl logs -f` for each new run."""

    cluster: OperatorCluster
    namespace: str
    runs: dict[str, list[FollowedLog]] = field(default_factory=dict)
    seen: set[tuple[str, int]] = field(default_factory=set)
    stopping: threading.Event = field(default_factory=threading.Event)
    leaders: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stopping.wait(0.3):
            try:
                pods = self.cluster.get("pods", "-n", self.namespace)["items"]
            except Exception:
                continue
            for p in pods:
                name = p["metadata"]["name"]
                c = container(p)
                if name not in self.leaders or not c.get("containerID"):
                    continue
                run = (p["metadata"]["uid"], c.get("restartCount", 0))
                if run not in self.seen:
                    self.seen.add(run)
                    log = FollowedLog(self.cluster, name, self.namespace)
                    self.runs.setdefault(name, []).append(log)

    def wait_step(self, chief: str, step: int) -> None:
        wait_for(
            lambda: (runs := self.runs.get(chief)) and newest_step(runs[-1].text) >= step,
            TRAIN_WAIT,
            f"{chief} at step {step}",
        )

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(10)

    def summary(self, chief: str) -> tuple[int, int]:
        """(runs that trained from step 0, the furthest step a run reached). A run that
        restores a checkpoint is not one: every start after the first restores (a finished
        chief's container too, which the kubelet starts again until its pod goes)."""
        logs = [r.wait() for r in self.runs.get(chief, [])]
        fresh = sum(1 for log in logs if STEP.search(log) and not RESTORED.search(log))
        return fresh, max((newest_step(log) for log in logs), default=0)


def _end(status: dict[str, Any]) -> dict[str, Any]:
    """What of a job's final status must not depend on the operator's kills."""
    failure = status.get("failure") or {}
    return {
        "conditions": [
            (c["type"], c["status"], c.get("reason")) for c in status.get("conditions") or []
        ],
        "failure": {k: failure.get(k) for k in ("replicaType", "exitCode", "reason")},
        "restarts": status.get("restarts", 0),
        "by type": {
            rt: s.get("restarts", 0) for rt, s in (status.get("replicaStatuses") or {}).items()
        },
        "last stop": (status.get("lastStop") or {}).get("cause"),
    }


def _live(
    cluster: OperatorCluster, namespace: str, life: Life, name: str, runs: ChiefRuns
) -> tuple[Any, str]:
    """The life of one job, to its end: what `_end` reads of it (or "Deleted"), and the pod
    whose runs `runs` follows."""
    job = life.make(name)
    chief = leader(job)
    runs.leaders.add(chief)
    cluster.apply(job, namespace)
    if life.act is not None:
        life.act(cluster, namespace, name, runs)

    def ended() -> Any:
        body = cluster.get("tfjob", name, "-n", namespace)
        if not body:
            return "Deleted"
        status = body.get("status") or {}
        if is_true(status, "Failed") or is_true(status, "Succeeded"):
            return _end(status) if life.want != "Deleted" else None
        return None

    end = wait_for(ended, TRAIN_WAIT, f"{name} ended ({life.want})", interval=0.5)
    if (job["spec"].get("runPolicy") or {}).get("cleanPodPolicy") == "None":
        # Its pods run on as asked, the chief's container started again and again: not for the
        # rest of the pass to share the node with.
        cluster.kubectl("delete", "tfjob", name, "-n", namespace, "--wait=false")
    return end, chief


def _pass(
    cluster: OperatorCluster, namespace: str, lives: list[Life], prefix: str
) -> dict[str, Any]:
    """Every life, LIVES_AT_ONCE at a time: by life, its end and its chief's runs."""
    runs = ChiefRuns(cluster, namespace)
    try:
        with ThreadPoolExecutor(LIVES_AT_ONCE) as pool:
            ends = {
                life.name: pool.submit(
                    _live, cluster, namespace, life, f"{prefix}-{life.name}", runs
                )
                for life in lives
            }
            results = {name: future.result() for name, future in ends.items()}
    finally:
        runs.close()
    return {name: (end, runs.summary(chief)) for name, (end, chief) in results.items()}


class Killer:
    """SIGKILLs the operator at seeded random moments: once a leader holds the Lease, after a
    drawn delay, its container (or both replicas'), through containerd; then deletes the dead
    pods, as a node's eviction would, so that fresh ones start without a crash-loop backoff."""

    def __init__(self, cluster: OperatorCluster, node: Node, seed: int) -> None:
        self.cluster, self.node, self.rng = cluster, node, random.Random(seed)
        self.kills: list[str] = []
        self.error: BaseException | None = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stopping.is_set():
                holder = wait_for(lambda: lease_holder(self.cluster), POD_WAIT, "a leader")
                if self.stopping.wait(self.rng.uniform(*KILL_AFTER)):
                    return
                both = self.rng.random() < BOTH
                victims = operator_pods(self.cluster) if both else [holder_pod(holder)]
                for name in victims:
                    self._kill(name)
                self.kills.append("both" if both else "leader")
                # The next kill is drawn once another process leads.
                self._next_leader(holder)
        except BaseException as e:  # the test fails with it
            self.error = e

    def _next_leader(self, killed: str) -> None:
        wait_for(
            lambda: lease_holder(self.cluster) not in ("", killed),
            LEASE_DURATION + POD_WAIT,
            "a new leader after the kill",
        )

    def _kill(self, name: str) -> None:
        c = container(pod(self.cluster, name, NAMESPACE), "operator")
        if "running" not in c.get("state", {}):
            return
        self.node.kill_container(c["containerID"])
        self.cluster.kubectl("delete", "pod", name, "-n", NAMESPACE, "--wait=false", check=False)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(POD_WAIT + LEASE_DURATION)
        if self.error is not None:
            raise self.error
        wait_for(lambda: len(operator_pods(self.cluster)) == 2, POD_WAIT, "two operator pods")


def _twins(cluster: OperatorCluster, node: Node, namespace: str, lives: list[Life]) -> None:
    started = time.monotonic()
    twins = _pass(cluster, namespace, lives, "twin")
    undisturbed = time.monotonic() - started
    print(f"\nKILLS seed={SEED} (TFJOB_KILL_SEED={SEED} draws the same moments)")
    killer = Killer(cluster, node, SEED)
    started = time.monotonic()
    try:
        killed = _pass(cluster, namespace, lives, "kill")
    finally:
        killer.stop()
    print(
        f"KILLS seed={SEED} jobs={len(lives)} kills={len(killer.kills)} "
        f"(both replicas: {killer.kills.count('both')}) twins={undisturbed:.0f}s "
        f"killed={time.monotonic() - started:.0f}s"
    )
    for life in lives:
        twin, got = twins[life.name], killed[life.name]
        if life.target is None:  # a failure: where the chief was when it came is not the point
            twin, got = twin[0], got[0]
        assert got == twin, (life.name, "killed", got, "twin", twin)
    for life in lives:
        end, (fresh, step) = twins[life.name]
        if life.want == "Deleted":
            assert end == "Deleted", (life.name, end)
        else:
            assert (life.want, "True") in [(t, s) for t, s, _ in end["conditions"]], end
        if life.target is not None:  # trained once from step 0, to the exact target
            assert (fresh, step) == (1, life.target), (life.name, fresh, step)
    assert killer.kills, "no kill before the jobs ended"


@pytest.mark.smoke
def test_operator_killed_through_a_job_ends_it_as_its_twin(
    cluster: OperatorCluster, node: Node, namespace: str
) -> None:
    _twins(cluster, node, namespace, SMOKE)


@pytest.mark.timeout(1800)
def test_operator_killed_through_every_life_ends_each_as_its_twin(
    cluster: OperatorCluster, node: Node, namespace: str
) -> None:
    _twins(cluster, node, namespace, LIVES)
