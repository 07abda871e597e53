"""Faults only a real node has, injected on the host mid-training: a chief's container killed,
kube-apiserver stopped for 20 s, kubelet and containerd restarted, a worker killed by the
kernel's OOM killer. Each fault prints one `CHAOS` line (fault, steps lost, restarts counted)
for the chaos table of docs/development.md."""

from __future__ import annotations

import time

import pytest

from tests.node.cluster_reads import (
    CHECKPOINT_EVERY,
    POD_WAIT,
    RESTORED,
    SAVED,
    STEP,
    FollowedLog,
    assert_scaled_down,
    children,
    conditions,
    container,
    fast_job,
    follow,
    newest_step,
    pod,
    wait_ended,
    wait_halfway_past_a_checkpoint,
)
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.nodes.node import Node
from tfjob_testbed.operator_cluster import OperatorCluster

pytestmark = pytest.mark.node
UNDISTURBED = [("Created", "True"), ("Running", "False"), ("Succeeded", "True")]
OUTAGE = 20  # seconds the API server stays down


def report(fault: str, steps_lost: int, restarts: int) -> None:
    print(f"\nCHAOS fault={fault!r} steps_lost={steps_lost} restarts={restarts}")


@pytest.mark.smoke
def test_chief_container_killed_resumes_from_its_checkpoint(
    cluster: OperatorCluster, node: Node, namespace: str
) -> None:
    cluster.apply(fast_job("chief", "mnist-ps", "--steps=1500"), namespace)
    first = follow(cluster, "chief-chief-0", namespace)
    # Killed between two checkpoints: what was trained since the last one is lost.
    wait_halfway_past_a_checkpoint(first)
    node.kill_container(container(pod(cluster, "chief-chief-0", namespace))["containerID"])
    before = first.wait(60)
    saved = max(int(m.group(2)) for m in SAVED.finditer(before))
    reached = newest_step(before)

    second = follow(cluster, "chief-chief-0", namespace, restarts=1)
    status = wait_ended(cluster, "chief", namespace, log=second)
    log = second.wait()
    restored = RESTORED.search(log)
    assert restored, log[-3000:]
    at = int(restored.group(2))
    assert at == int(restored.group(1)) >= saved, (saved, restored.group(0))
    steps = [int(s) for s in STEP.findall(log)]
    assert steps and steps[0] > at and steps[-1] == 1500, log[-3000:]
    assert status["replicaStatuses"]["Chief"]["restarts"] == 1, status
    assert status["restarts"] == 1 and not status.get("failure"), status
    lost = max(0, reached - at)
    assert lost <= CHECKPOINT_EVERY, (reached, at)
    report("chief container SIGKILLed", lost, status["restarts"])
    assert_scaled_down(cluster, "chief", namespace)


# Restarts at once first, the API server's outage last: training goes on well past each.
OUTAGES = ("kubelet", "containerd", "kube-apiserver")
OUTAGE_STEPS = 8000


def test_node_processes_restarted_and_stopped_mid_training(
    cluster: OperatorCluster, node: Node, namespace: str
) -> None:
    """kubelet restarted, containerd restarted, then kube-apiserver stopped for 20 s, one after
    the other in one job's training. After each the containers live on, the chief's log is
    readable again and training moves on; the operator reconnects, and the job ends as an
    undisturbed one: at the exact target step, with the same children and no restart."""
    cluster.apply(fast_job("outage", "mnist-ps", f"--steps={OUTAGE_STEPS}"), namespace)
    chief = follow(cluster, "outage-chief-0", namespace)
    chief.until(lambda t: newest_step(t) >= 50, "the chief at step 50")
    before = children(cluster, "outage", namespace)
    pods = ("outage-chief-0", "outage-ps-0", "outage-worker-0", "outage-worker-1")
    ids = {name: container(pod(cluster, name, namespace))["containerID"] for name in pods}
    for process in OUTAGES:
        at = newest_step(node.container_log(namespace, "outage-chief-0"))
        assert at < OUTAGE_STEPS, f"the job ended before {process}'s fault"
        started = time.monotonic()

        def over(process: str = process, at: int = at, started: float = started) -> bool:
            if process == "containerd":
                return True  # a restart at once: no container log is written while it is down
            # Training goes on meanwhile (read from the log files containerd writes: the API
            # may be down).
            moved = newest_step(node.container_log(namespace, "outage-chief-0")) > at
            return moved and (process != "kube-apiserver" or time.monotonic() - started >= OUTAGE)

        node.outage(process, over)
        # `kubectl logs -f` ends with the fault: follow the same run again, from its first
        # line, once kubelet can read it again (after a containerd restart it takes a moment).
        wait_for(
            lambda: STEP.search(cluster.logs("outage-chief-0", namespace)),
            POD_WAIT,
            f"the chief's log readable again after {process}",
        )
        chief = FollowedLog(cluster, "outage-chief-0", namespace)
        # Every container lived on. The chief may have finished by now (and its pod gone), but
        # the servers run until the scale-down: any of them still here is in its first container.
        for name in pods:
            now = container(pod(cluster, name, namespace))
            assert not now or now["containerID"] == ids[name], (process, name, now)
        fault = "stopped for 20 s" if process == "kube-apiserver" else "restarted"
        report(
            f"{process} {fault}", 0, cluster.tfjob_status("outage", namespace).get("restarts", 0)
        )
    status = wait_ended(cluster, "outage", namespace, log=chief)
    assert conditions(status) == UNDISTURBED, status
    assert status["restarts"] == 0 and not status.get("failure"), status
    assert children(cluster, "outage", namespace) == before
    log = chief.wait()
    assert newest_step(log) == OUTAGE_STEPS and "restored" not in log, log[-2000:]
    assert_scaled_down(cluster, "outage", namespace)


def test_oom_killed_worker_restarts_until_the_backoff_limit(
    cluster: OperatorCluster, node: Node, namespace: str
) -> None:
    """A worker whose memory limit is too small for TensorFlow is OOM-killed (exit 137); under
    restartPolicy ExitCode that restarts, counted toward backoffLimit, and past it the job fails
    with the reason in status."""
    job = fast_job("oom", "mnist-ps", "--steps=5000")
    job["spec"]["runPolicy"] = {"backoffLimit": 1}
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    worker["replicas"] = 1
    assert worker["restartPolicy"] == "ExitCode"
    worker["template"]["spec"]["containers"][0]["resources"] = {"limits": {"memory": "48Mi"}}
    cluster.apply(job, namespace)
    # Asserted on the outcome, not on a moment: on a loaded machine both kills may come before
    # the operator looks, so the Restarting state between them may never be seen.
    status = wait_ended(cluster, "oom", namespace, want="Failed", timeout=POD_WAIT)
    assert status["failure"]["exitCode"] == 137, status
    assert status["failure"]["reason"] == "OOMKilled", status
    assert status["failure"]["pod"] == "oom-worker-0", status
    # The first kill was a restart, not the end: the job failed once the count passed
    # backoffLimit 1 (at the second kill, or later if the operator saw several at once).
    restarts = status["replicaStatuses"]["Worker"]["restarts"]
    assert restarts >= 2, status
    message = status["conditions"][-1]["message"]
    assert f"{restarts} failure restarts exceed backoffLimit 1" in message, message
    assert "OOMKilled" in message, message
    report("worker OOM-killed (48Mi limit)", 0, status["restarts"])
    assert_scaled_down(cluster, "oom", namespace)
