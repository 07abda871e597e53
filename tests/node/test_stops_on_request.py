"""Stops on request on the real node, in the middle of a checkpoint interval as long as the
training: the chief's pod deleted by hand, on a job of its own (`make test`'s one stop); then one
running job through every other in turn: suspend and resume, `kubectl drain` of the chief's pod,
of a parameter server's and of a worker's, workers 2 → 3 (`tfjob scale`) → 1 (`kubectl patch`,
as `kubectl edit` writes), and a `helm upgrade` of the operator, which touches no pod.

Each stop must lose 0 steps: the chief saves at the step it is on and the next run restores
exactly that step; no failure or restart is counted, and the job ends at its exact target.
Each prints one `CHAOS` line (stop, steps lost, restarts, seconds from the stop to training
again) for the chaos table of docs/development.md."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.node.cluster_reads import (
    POD_WAIT,
    RESTORED,
    STEP,
    STOPPED,
    FollowedLog,
    fast_job,
    follow,
    helm_operator,
    job_pods,
    newest_step,
    pod,
    wait_ended,
)
from tfjob_protocol.stop import EXIT_STOPPED
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.operator_cluster import OperatorCluster
from tfjob_testbed.project.tfjob_cli import tfjob_cli

pytestmark = pytest.mark.node
JOB = "stops"
CHIEF = f"{JOB}-chief-0"
# The chief trains about 150 steps a second, and on while a drained worker is taken back (tens
# of seconds): the last run ends well after the last stop.
TARGET = 20000
# One stop, then training on to the end: seconds of training, well past the stop.
ONE_STOP_TARGET = 3000
# A worker drained alone waits this long for a chief that does not stop, then leaves.
GRACE = 15
TRAIN_BETWEEN = 60  # steps trained in each run before the next stop
# TensorFlow's coordinator, in the chief's log (`ps.show_recoveries`), once the worker serves again.
WORKER_BACK = re.compile(r"Worker \S*/task:1 has been recovered")


def report(stop: str, lost: int, restarts: int, back: float) -> None:
    print(f"\nCHAOS stop={stop!r} steps_lost={lost} restarts={restarts} back_in_sec={back:.0f}")


def labels(replica_type: str) -> str:
    return f"tfjob.dev/job-name={JOB},tfjob.dev/replica-type={replica_type}"


class Run:
    """The job's chief, followed run after run."""

    def __init__(self, cluster: OperatorCluster, namespace: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.log = follow(cluster, CHIEF, namespace)
        self.stops = 0

    def pod_uid(self) -> str:
        return str(pod(self.cluster, CHIEF, self.namespace)["metadata"]["uid"])

    def trained(self, steps: int) -> int:
        """Until this run has trained `steps` past where it began; the step reached."""
        begun = self.begun()
        self.log.until(lambda t: newest_step(t) >= begun + steps, "training")
        return newest_step(self.log.text)

    def begun(self) -> int:
        restored = RESTORED.search(self.log.text)
        return int(restored.group(2)) if restored else 0

    def stop(
        self, name: str, how: Callable[[], None], after: Callable[[], None] = lambda: None
    ) -> None:
        """Stop the job as `how` does, then `after` lets it go on; hold the stop to 0 steps lost
        and the new run to that step."""
        uid = self.pod_uid()
        self.trained(TRAIN_BETWEEN)
        stopped_at = time.monotonic()
        how()
        before = self.log.wait(POD_WAIT)
        reached = newest_step(before)
        saved = STOPPED.search(before)
        assert saved, before[-3000:]
        step = int(saved.group(1))
        assert step == int(saved.group(2)) >= reached, (reached, saved.group(0))
        after()
        wait_for(lambda: self._new_run(uid), POD_WAIT, f"{CHIEF} running again")
        self.log = FollowedLog(self.cluster, CHIEF, self.namespace)
        try:
            self.log.until(STEP.search, "training again")
        except AssertionError as e:
            status = self.cluster.tfjob_status(JOB, self.namespace)
            raise AssertionError(f"{e}\n{self.log.text[-3000:]}\n{status}") from None
        back = time.monotonic() - stopped_at
        assert self.begun() == step, self.log.text[-3000:]
        status = self.cluster.tfjob_status(JOB, self.namespace)
        assert not status.get("failure") and status.get("restarts", 0) == 0, status
        assert (status.get("lastStop") or {}).get("savedStep") == step, status
        report(name, max(0, reached - step), status.get("restarts", 0), back)

    def _new_run(self, uid: str) -> bool:
        """A new pod, or a new container run in the same pod, is running."""
        try:
            current = pod(self.cluster, CHIEF, self.namespace)
        except Exception:
            return False
        statuses = current.get("status", {}).get("containerStatuses") or []
        running = any("running" in s.get("state", {}) for s in statuses)
        return running and (current["metadata"]["uid"] != uid or _restarted(statuses))


def _restarted(statuses: list[dict[str, Any]]) -> bool:
    last = [s.get("lastState", {}).get("terminated") or {} for s in statuses]
    return any(t.get("exitCode") == EXIT_STOPPED for t in last)


def start(cluster: OperatorCluster, namespace: str, target: int) -> Run:
    """The job, applied, with its chief followed."""
    job = fast_job(JOB, "mnist-ps", f"--steps={target}", f"--checkpoint-every={target}")
    job["spec"].setdefault("runPolicy", {})["terminationGracePeriodSeconds"] = GRACE
    cluster.apply(job, namespace)
    return Run(cluster, namespace)


def finish(run: Run, target: int) -> None:
    """The job ends Succeeded at exactly its target step, with no failure or restart counted."""
    status = wait_ended(run.cluster, JOB, run.namespace, log=run.log)
    log = run.log.wait()
    assert [int(s) for s in STEP.findall(log)][-1] == target, log[-3000:]
    assert status.get("restarts", 0) == 0 and not status.get("failure"), status


@pytest.mark.smoke
def test_the_chiefs_pod_deleted_by_hand_loses_no_step(
    cluster: OperatorCluster, namespace: str
) -> None:
    """One stop on request, the one that asks least of the rest of the bed (make test); the
    next test goes through every other one on one job."""
    run = start(cluster, namespace, ONE_STOP_TARGET)
    run.stop(
        "the chief's pod deleted by hand",
        lambda: cluster.kubectl("delete", "pod", CHIEF, "-n", namespace, "--wait=false"),
    )
    finish(run, ONE_STOP_TARGET)


def test_every_other_stop_on_request_loses_no_step(
    cluster: OperatorCluster, namespace: str
) -> None:
    run = start(cluster, namespace, TARGET)
    # The node the job runs on: the real node's, or kind's.
    node_name = pod(cluster, CHIEF, namespace)["spec"]["nodeName"]

    def patch(body: dict[str, Any]) -> None:
        cluster.kubectl("patch", "tfjob", JOB, "-n", namespace, "--type=merge",
                        "-p", json.dumps(body))  # fmt: skip

    def drain(selector: str) -> Callable[[], None]:
        return lambda: cluster.kubectl(
            "drain", node_name, f"--pod-selector={selector}", "--ignore-daemonsets",
            "--delete-emptydir-data", "--timeout=120s",
        )  # fmt: skip

    def uncordon() -> None:
        cluster.kubectl("uncordon", node_name)

    def suspend(value: bool) -> Callable[[], None]:
        return lambda: patch({"spec": {"runPolicy": {"suspend": value}}})

    def scale_to_three() -> None:
        done = tfjob_cli(cluster.kubeconfig, "scale", JOB, "--workers", "3", "-n", namespace)
        assert done.returncode == 0, done.stderr

    def one_worker() -> None:
        patch({"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}}})

    run.stop("suspended, then resumed", suspend(True), suspend(False))
    run.stop("kubectl drain of the chief's node (its pod)", drain(labels("chief")), uncordon)
    # A parameter server drained alone: the operator stops the job with it, the chief saves
    # while that server still serves, and the job restarts together.
    run.stop("kubectl drain of a parameter server's node (its pod)", drain(labels("ps")), uncordon)
    # A worker drained alone: the chief trains on and runs the worker's closures elsewhere; the
    # worker serves until its grace period nearly ends, waiting for a chief that does not stop.
    chief_uid, worker = run.pod_uid(), f"{JOB}-worker-1"
    worker_uid = _pod_uid(cluster, namespace, worker)
    recoveries = len(WORKER_BACK.findall(run.log.text))
    drained = time.monotonic()
    drain(f"{labels('worker')},apps.kubernetes.io/pod-index=1")()
    uncordon()
    wait_for(
        lambda: _running_uid(cluster, namespace, worker) not in (None, worker_uid),
        POD_WAIT,
        "the worker made again",
    )
    # The next stop finds the worker back in the chief's cluster, not still starting: a stop
    # within that recovery is another case (the chief's save needs every worker it knows).
    run.log.until(lambda t: len(WORKER_BACK.findall(t)) > recoveries,
                  "the chief's coordinator taking the worker back", POD_WAIT)  # fmt: skip
    status = cluster.tfjob_status(JOB, namespace)
    assert run.pod_uid() == chief_uid and STEP.search(run.log.text)
    assert (status.get("lastStop") or {}).get("cause") == "Disrupted", status
    report("kubectl drain of a worker's node (its pod)", 0, status.get("restarts", 0),
           time.monotonic() - drained)  # fmt: skip
    run.stop("workers 2 -> 3 (tfjob scale)", scale_to_three)
    run.stop("workers 3 -> 1 (kubectl patch)", one_worker)

    # The operator upgraded (its pods replaced, its settings changed): the job's pods are
    # neither restarted nor replaced, and training goes on.
    pods = _pods(cluster, namespace)
    upgraded = time.monotonic()
    helm_operator(cluster, "logLevel=debug")
    reached = newest_step(run.log.text)
    run.log.until(lambda t: newest_step(t) > reached, "training on")
    assert _pods(cluster, namespace) == pods
    report("helm upgrade of the operator", 0, 0, time.monotonic() - upgraded)
    helm_operator(cluster, "logLevel=info")

    finish(run, TARGET)


def _pod_uid(cluster: OperatorCluster, namespace: str, name: str) -> str | None:
    found = cluster.get("pods", "-n", namespace, "--field-selector", f"metadata.name={name}")
    items = found["items"]
    return str(items[0]["metadata"]["uid"]) if items else None


def _pods(cluster: OperatorCluster, namespace: str) -> dict[str, tuple[str, int]]:
    """The job's pods: name -> (uid, restarts of the container)."""
    found = job_pods(cluster, namespace, JOB)
    return {
        p["metadata"]["name"]: (
            p["metadata"]["uid"],
            sum(s.get("restartCount", 0) for s in p["status"].get("containerStatuses") or []),
        )
        for p in found
    }


def _running_uid(cluster: OperatorCluster, namespace: str, name: str) -> str | None:
    """The uid of the pod named `name` once its container runs."""
    found = cluster.get("pods", "-n", namespace, "--field-selector", f"metadata.name={name}")
    running = [
        p
        for p in found["items"]
        if any("running" in s.get("state", {}) for s in p["status"].get("containerStatuses") or [])
    ]
    return str(running[0]["metadata"]["uid"]) if running else None
