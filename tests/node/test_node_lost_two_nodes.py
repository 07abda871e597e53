"""A node lost mid-training, on two real nodes: the node holding a worker dies (kubelet and
containerd stopped for good, its containers killed) or is cut off (its pods keep running), and
the node holding the chief is lost with a ReadWriteMany claim (the chief moves) or a
ReadWriteOnce one (it cannot: the status says why until the node is back). Each job ends
Succeeded at its exact target step. Each test prints one `CHAOS` line for
docs/development.md's table."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.node.cluster_reads import (
    CHECKPOINT_EVERY,
    POD_WAIT,
    RESTORED,
    SAVED,
    STEP,
    assert_scaled_down,
    claim_files,
    fast_job,
    follow,
    newest_step,
    pod,
    wait_ended,
    wait_halfway_past_a_checkpoint,
)
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.nodes.node import NODE_NAME
from tfjob_testbed.nodes.realnode import ctr
from tfjob_testbed.nodes.second_node import SecondNode
from tfjob_testbed.operator_cluster import OperatorCluster

pytestmark = pytest.mark.node
TIMEOUT = 10  # runPolicy.nodeLostTimeoutSeconds of these jobs
# Kubernetes notices a silent node after the bed's node-monitor grace period (20 s), then the
# timeout passes, then a new pod starts: well within this.
LOST_WAIT = 180
CKPT_INDEX = re.compile(r"ckpt-(\d+)\.index$")


def report(fault: str, steps_lost: int, restarts: int) -> None:
    print(f"\nCHAOS fault={fault!r} steps_lost={steps_lost} restarts={restarts}")


def affinity(node: str, required: bool) -> dict[str, Any]:
    term = {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]
    }
    if required:
        rule = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    else:
        rule = {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]
        }
    return {"nodeAffinity": rule}


def lost_node_job(
    name: str, steps: int, away: str, on_first: tuple[str, ...], mode: str
) -> dict[str, Any]:
    """mnist-ps with one worker: `away` (a replica type) prefers the second node, the types in
    `on_first` must run on the first; the checkpoint claim has access mode `mode`."""
    # A chief left waiting on a lost peer's connection restarts after 20 s (default 60).
    job = fast_job(name, "mnist-ps", f"--steps={steps}", "--stall-timeout=20")
    spec = job["spec"]
    spec["runPolicy"]["nodeLostTimeoutSeconds"] = TIMEOUT
    storage = spec["checkpoint"]["storage"]
    storage["accessModes"] = [mode]
    if mode == "ReadWriteMany":
        storage["storageClassName"] = "shared"  # the bed's NFS-like class, on both nodes
    spec["tfReplicaSpecs"]["Worker"]["replicas"] = 1
    for rt, rs in spec["tfReplicaSpecs"].items():
        if rt == away:
            rs["template"]["spec"]["affinity"] = affinity("tfjob-node-2", required=False)
        elif rt in on_first:
            rs["template"]["spec"]["affinity"] = affinity(NODE_NAME, required=True)
    return job


def running_on(second: SecondNode, namespace: str) -> list[str]:
    """The containers of the namespace's pods that run on the second node, from its containerd."""
    label = f'labels."io.kubernetes.pod.namespace"=={namespace}'
    ours = set(ctr(second.socket, "containers", "ls", "-q", label).stdout.split())
    tasks = [line.split() for line in ctr(second.socket, "tasks", "ls").stdout.splitlines()[1:]]
    return [t[0] for t in tasks if t and t[0] in ours and "RUNNING" in t]


def node_of(cluster: OperatorCluster, name: str, namespace: str) -> str:
    return pod(cluster, name, namespace).get("spec", {}).get("nodeName", "")


def uid_of(cluster: OperatorCluster, name: str, namespace: str) -> str:
    return pod(cluster, name, namespace).get("metadata", {}).get("uid", "")


def wait_node_lost(cluster: OperatorCluster, job: str, pod_: str, namespace: str, node: str) -> str:
    """The pod named in status.waiting as NodeLost, with its Warning Event; returns the entry."""
    why = wait_for(
        lambda: (
            (cluster.tfjob_status(job, namespace).get("waiting") or {})
            .get(pod_, "")
            .startswith("NodeLost")
            and cluster.tfjob_status(job, namespace)["waiting"][pod_]
        ),
        LOST_WAIT,
        f"{pod_} NodeLost in status.waiting",
    )
    assert f"node {node} stopped answering" in why, why
    events = cluster.get(
        "events", "-n", namespace, "--field-selector", f"involvedObject.name={job}"
    )
    lost = [
        e
        for e in events.get("items", [])
        if e.get("reason") == "NodeLost" and f"Pod {pod_}:" in e.get("message", "")
    ]
    assert len(lost) == 1 and lost[0]["type"] == "Warning" and pod_ in lost[0]["message"], lost
    return why


def wait_replaced(cluster: OperatorCluster, name: str, namespace: str, old_uid: str) -> str:
    """Wait for a new pod of the same name (the lost one deleted for good); its node."""
    return wait_for(
        lambda: (
            (p := pod(cluster, name, namespace))
            and p["metadata"]["uid"] != old_uid
            and p.get("spec", {}).get("nodeName")
        ),
        LOST_WAIT,
        f"{name} made again",
    )


@pytest.mark.parametrize("fault", [pytest.param("dead", marks=pytest.mark.smoke), "partitioned"])
def test_a_worker_node_lost_mid_training(
    cluster: OperatorCluster, second_node: SecondNode, namespace: str, fault: str
) -> None:
    name, steps = f"wlost-{fault[:4]}", 1200
    cluster.apply(lost_node_job(name, steps, "Worker", ("Chief", "PS"), "ReadWriteMany"), namespace)
    worker, chief_pod = f"{name}-worker-0", f"{name}-chief-0"
    chief = follow(cluster, chief_pod, namespace)
    chief.until(lambda t: newest_step(t) >= 100, "the chief at step 100")
    assert node_of(cluster, worker, namespace) == second_node.name
    assert node_of(cluster, chief_pod, namespace) == NODE_NAME
    old = uid_of(cluster, worker, namespace)
    if fault == "dead":
        second_node.kill()
    else:
        second_node.partition()
    why = wait_node_lost(cluster, name, worker, namespace, second_node.name)
    assert f"nodeLostTimeoutSeconds {TIMEOUT}" in why
    assert wait_replaced(cluster, worker, namespace, old) == NODE_NAME
    status = wait_ended(cluster, name, namespace)
    assert status["replicaStatuses"]["Worker"]["restarts"] == 1, status
    assert not status.get("failure") and "waiting" not in status, status
    # The chief waited on its connection to the lost worker: it either picked the new one up,
    # or its stall watchdog restarted it from the newest checkpoint (one restart more).
    chief_restarts = status["replicaStatuses"]["Chief"]["restarts"]
    assert chief_restarts in (0, 1) and status["restarts"] == 1 + chief_restarts, status
    first = chief.wait(60) if chief_restarts else chief.text
    lost = 0
    if chief_restarts:
        saved = max(int(m.group(2)) for m in SAVED.finditer(first))
        lost = newest_step(first) - saved
        assert "waits on a connection to a peer that was replaced" in first, first[-2000:]
    assert lost <= CHECKPOINT_EVERY, first[-2000:]
    # Exact: the newest checkpoint is the target's, and none lies beyond it.
    files = claim_files(cluster, f"{name}-checkpoints", namespace)
    numbers = {int(m.group(1)) for f in files if (m := CKPT_INDEX.search(f))}
    assert max(numbers) == steps, sorted(numbers)
    if fault == "partitioned":
        # Back on the network, the node's kubelet finds its pod deleted and stops it.
        second_node.heal()
        wait_for(
            lambda: not running_on(second_node, namespace),
            POD_WAIT,
            "the cut-off worker stopped by its kubelet",
        )
    report(f"the node holding a worker {fault}", lost, status["restarts"])
    assert_scaled_down(cluster, name, namespace)


def chief_halfway_on(
    cluster: OperatorCluster, second: SecondNode, chief: str, namespace: str
) -> str:
    """Once the chief, on the second node, is halfway past a checkpoint: its pod's uid."""
    wait_halfway_past_a_checkpoint(follow(cluster, chief, namespace))
    assert node_of(cluster, chief, namespace) == second.name
    return uid_of(cluster, chief, namespace)


def resumed(
    cluster: OperatorCluster, job: str, namespace: str, steps: int, old_may_finish: bool = False
) -> tuple[dict[str, Any], int]:
    """Follow the new chief to the job's success: (status, the step it restored), once it has
    trained from after that step to exactly `steps`. `old_may_finish`: the old chief, cut off
    and back before its kubelet stops it, may have trained to the end itself while the new one
    could not start (the new one claims the checkpoint directory only once it runs): then the
    new one restores the target step and has nothing to do."""
    second = follow(cluster, f"{job}-chief-0", namespace)
    status = wait_ended(cluster, job, namespace, log=second)
    log = second.wait()
    restored = RESTORED.search(log)
    assert restored, log[-3000:]
    at = int(restored.group(2))
    steps_seen = [int(s) for s in STEP.findall(log)]
    if old_may_finish and at == steps:
        assert "nothing to do" in log and not steps_seen, log[-3000:]
        return status, at
    assert steps_seen and steps_seen[0] > at and steps_seen[-1] == steps, log[-3000:]
    return status, at


def test_the_chief_node_dies_with_a_read_write_many_claim(
    cluster: OperatorCluster, second_node: SecondNode, namespace: str
) -> None:
    name, steps = "clost-rwx", 1500
    cluster.apply(lost_node_job(name, steps, "Chief", ("PS", "Worker"), "ReadWriteMany"), namespace)
    chief_pod = f"{name}-chief-0"
    old = chief_halfway_on(cluster, second_node, chief_pod, namespace)
    second_node.kill()
    before = second_node.container_log(namespace, chief_pod)
    saved = max(int(m.group(2)) for m in SAVED.finditer(before))
    reached = newest_step(before)
    wait_node_lost(cluster, name, chief_pod, namespace, second_node.name)
    assert wait_replaced(cluster, chief_pod, namespace, old) == NODE_NAME
    status, at = resumed(cluster, name, namespace, steps)
    assert at >= saved, (saved, at)
    lost = max(0, reached - at)
    assert lost <= CHECKPOINT_EVERY, (reached, at)
    assert status["replicaStatuses"]["Chief"]["restarts"] == 1, status
    assert status["restarts"] == 1 and not status.get("failure"), status
    report("the node holding the chief dead (ReadWriteMany claim)", lost, status["restarts"])
    assert_scaled_down(cluster, name, namespace)


def test_the_chief_node_cut_off_with_a_read_write_once_claim(
    cluster: OperatorCluster, second_node: SecondNode, namespace: str
) -> None:
    """The chief and the worker mount the claim; its volume lives on the second node. Cut off,
    they cannot start elsewhere: the status says why; once the node is back, the job ends."""
    name, steps = "clost-rwo", 1500
    job = lost_node_job(name, steps, "Chief", ("PS",), "ReadWriteOnce")
    worker_spec = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    worker_spec["affinity"] = affinity(second_node.name, required=False)
    cluster.apply(job, namespace)
    chief_pod = f"{name}-chief-0"
    old = chief_halfway_on(cluster, second_node, chief_pod, namespace)
    second_node.partition()
    before = second_node.container_log(namespace, chief_pod)
    reached = newest_step(before)
    wait_node_lost(cluster, name, chief_pod, namespace, second_node.name)

    def blocked() -> str:
        if uid_of(cluster, chief_pod, namespace) in ("", old):
            return ""
        why = (cluster.tfjob_status(name, namespace).get("waiting") or {}).get(chief_pod, "")
        return why if "ReadWriteOnce" in why else ""

    why = wait_for(blocked, LOST_WAIT, "the new chief held by its ReadWriteOnce volume")
    assert why.startswith(f"Unschedulable: checkpoint claim {name}-checkpoints is ReadWriteOnce")
    second_node.heal()
    status, at = resumed(cluster, name, namespace, steps, old_may_finish=True)
    lost = max(0, reached - at)
    assert lost <= CHECKPOINT_EVERY, (reached, at)
    assert node_of(cluster, chief_pod, namespace) in ("", second_node.name)
    assert status["replicaStatuses"]["Chief"]["restarts"] == 1, status
    report("the node holding the chief cut off (ReadWriteOnce claim)", lost, status["restarts"])
    assert_scaled_down(cluster, name, namespace)
