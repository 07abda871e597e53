"""A node that stops answering: told from the pod alone, shown at once, its pods let go after
runPolicy.nodeLostTimeoutSeconds and counted once, as a failure under the restartPolicy."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest

from tests.unit.operator.rules.lifecycle.decide_run import T0, Run, running
from tfjob_operator.rules import nodelost
from tfjob_operator.rules import status as st
from tfjob_operator.rules.pods import observe
from tfjob_testbed.core.jobs import pod, tfjob

NODE = "gpu-node-7"


def on_node(body, node=NODE, ready=True, ready_since=T0):
    """`body` bound to `node`, its Ready condition as given."""
    body = copy.deepcopy(body)
    body["spec"]["nodeName"] = node
    body["status"]["conditions"] = [
        {"type": "Ready", "status": str(ready), "lastTransitionTime": st.timestamp(ready_since)}
    ]
    return body


def lost(body, since=T0):
    """As the node controller leaves a pod whose node stopped answering."""
    return on_node(body, ready=False, ready_since=since)


@pytest.mark.parametrize(
    "body, is_lost",
    [
        (lost(pod("j", "worker", 0)), True),
        (on_node(pod("j", "worker", 0)), False),  # healthy
        # The kubelet's own Not Ready: a container that is not ready, or not running.
        (on_node(pod("j", "worker", 0, state="waiting"), ready=False), False),
        (on_node(pod("j", "worker", 0, state="terminated", exit_code=1), ready=False), False),
        # Not bound to a node, or no container has reported yet.
        ({**lost(pod("j", "worker", 0)), "spec": {"containers": []}}, False),
    ],
)
def test_a_lost_node_is_told_from_the_pod_alone(body, is_lost):
    obs = observe(body)
    assert obs is not None
    assert (obs.lost_since == T0) is is_lost
    assert obs.node == (NODE if is_lost else "")


def test_a_readiness_gate_that_holds_ready_containers_back_is_no_lost_node():
    body = lost(pod("j", "worker", 0))
    body["status"]["conditions"][0]["reason"] = "ReadinessGatesNotReady"
    assert observe(body).lost_since is None


def test_a_sidecar_that_is_not_ready_means_the_kubelet_speaks():
    body = lost(pod("j", "worker", 0))
    body["status"]["containerStatuses"].append(
        {"name": "sidecar", "ready": False, "state": {"running": {}}}
    )
    assert observe(body).lost_since is None


SPEC = {"Chief": 1, "PS": 1, "Worker": 2}


def started(run_policy=None, policy="OnFailure"):
    run = Run(tfjob(replicas=SPEC, restart_policy=policy, run_policy=run_policy))
    run.step()
    run.step(*running("mnist", SPEC))
    assert run.state() == "Running"
    return run


def with_lost_worker(**lost_kw):
    pods = running("mnist", SPEC)
    pods[-1] = lost(pods[-1], **lost_kw)
    return pods


def test_a_lost_pod_waits_with_node_lost_at_once_and_one_warning():
    run = started()
    d = run.step(*with_lost_worker(), after=5)
    why = run.status["waiting"]["mnist-worker-1"]
    assert why.startswith("NodeLost: node gpu-node-7 stopped answering")
    assert st.timestamp(T0) in why and "nodeLostTimeoutSeconds 120" in why
    assert run.status["activeReplicas"] == "3/4", "a pod on a lost node is not active"
    assert [(t, r) for t, r, _ in d.events] == [("Warning", "NodeLost")]
    assert "mnist-worker-1" in d.events[0][2]
    # Looked at again when the timeout passes, whatever else happens.
    assert d.requeue_after == pytest.approx(120 - 5 - 1 - 1 + 0.5, abs=1)
    assert d.delete_pods == []
    d = run.step(*with_lost_worker(), after=5)
    assert not d.events and not d.patch, "the same every time: no write, no event"


def test_past_the_timeout_the_pod_is_deleted_and_counted_once():
    run = started(run_policy={"nodeLostTimeoutSeconds": 30})
    run.step(*with_lost_worker(), after=1)
    d = run.step(*with_lost_worker(), after=40)
    assert d.delete_pods == [("mnist-worker-1", "uid-mnist-worker-1")]
    assert run.status["replicaStatuses"]["Worker"]["restarts"] == 1
    assert run.status["restarts"] == 1
    assert run.state() == "Restarting"
    cond = st.find(run.status, st.Cond.RESTARTING)
    assert "Worker pod mnist-worker-1 was lost with node gpu-node-7" in cond["message"]
    # Seen again before the deletion shows: deleted again, counted once.
    d = run.step(*with_lost_worker(), after=1)
    assert d.delete_pods == [("mnist-worker-1", "uid-mnist-worker-1")]
    assert run.status["restarts"] == 1
    # Its successor (a new uid) runs: running again, the count stays.
    pods = running("mnist", SPEC)
    pods[-1] = pod("mnist", "worker", 1, uid="uid-new")
    d = run.step(*pods)
    assert d.delete_pods == [] and run.state() == "Running"
    assert run.status["restarts"] == 1 and "waiting" not in run.status
    assert "mnist-worker-1" not in run.status["terminations"]


def test_a_lost_node_counts_toward_the_backoff_limit():
    run = started(run_policy={"nodeLostTimeoutSeconds": 10, "backoffLimit": 0})
    run.step(*with_lost_worker(), after=20)
    assert run.state() == "Failed"
    cond = st.find(run.status, st.Cond.FAILED)
    assert cond["reason"] == "BackoffLimitExceeded"
    assert "lost with node gpu-node-7" in cond["message"]
    assert run.status["failure"] == {
        "replicaType": "Worker",
        "pod": "mnist-worker-1",
        "reason": "NodeLost",
        "node": NODE,
    }


def test_under_restart_policy_never_a_lost_node_fails_the_job():
    run = started(run_policy={"nodeLostTimeoutSeconds": 10}, policy="Never")
    d = run.step(*with_lost_worker(), after=20)
    assert run.state() == "Failed"
    assert (
        "was lost with node gpu-node-7 under restartPolicy Never"
        in (st.find(run.status, st.Cond.FAILED)["message"])
    )
    assert d.delete_pods == [("mnist-worker-1", "uid-mnist-worker-1")], "it holds a GPU still"
    assert run.status["failure"]["reason"] == "NodeLost"


def test_exit_code_policy_retries_a_lost_node():
    run = started(run_policy={"nodeLostTimeoutSeconds": 10}, policy="ExitCode")
    run.step(*with_lost_worker(), after=20)
    assert run.state() == "Restarting" and run.status["restarts"] == 1


def test_timeout_zero_waits_for_the_node():
    run = started(run_policy={"nodeLostTimeoutSeconds": 0})
    d = run.step(*with_lost_worker(), after=3600)
    assert d.delete_pods == [] and run.status["restarts"] == 0
    assert "nodeLostTimeoutSeconds is 0" in run.status["waiting"]["mnist-worker-1"]
    assert d.requeue_after is None
    # The node comes back: the kubelet reports the pod ready again.
    pods = running("mnist", SPEC)
    pods[-1] = on_node(pods[-1])
    run.step(*pods)
    assert "waiting" not in run.status and run.state() == "Running"


def test_a_suspended_job_deletes_and_counts_nothing():
    run = started(run_policy={"nodeLostTimeoutSeconds": 10})
    run.body["spec"]["runPolicy"]["suspend"] = True
    run.body["metadata"]["generation"] = 2
    d = run.step(*with_lost_worker(), after=20)
    assert d.delete_pods == [] and run.status.get("restarts", 0) == 0


def test_deadline_follows_the_timeout():
    assert nodelost.deadline(T0, None) == T0 + timedelta(seconds=120)
    assert nodelost.deadline(T0, 5) == T0 + timedelta(seconds=5)
    assert nodelost.deadline(T0, 0) is None


# The scheduler's words for a volume tied to another node: Kubernetes 1.28's, then current
# releases' (1.37).
CONFLICTS = {
    "1.28": (
        "0/2 nodes are available: 1 node(s) had taint {node.kubernetes.io/unreachable: }, that "
        "the pod didn't tolerate, 1 node(s) had volume node affinity conflict.",
        "volume node affinity conflict",
    ),
    "1.37": (
        "0/2 nodes are available: 1 node(s) didn't match PersistentVolume's node affinity, 1 "
        "node(s) had untolerated taint(s). preemption: 0/2 nodes are available: 2 Preemption is "
        "not helpful for scheduling.",
        "didn't match PersistentVolume's node affinity",
    ),
}


def unschedulable(rt, index, message):
    body = pod("mnist", rt, index, state="waiting", reason="ContainerCreating")
    body["status"]["containerStatuses"] = []
    body["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    ]
    return body


@pytest.mark.parametrize(
    "checkpoint, rt, says",
    [
        (
            {"storage": {"size": "1Gi"}},
            "chief",
            "checkpoint claim mnist-checkpoints is ReadWriteOnce",
        ),
        (
            {"storage": {"size": "1Gi", "accessModes": ["ReadWriteMany"]}},
            "chief",
            "the volume of checkpoint claim mnist-checkpoints is tied to nodes",
        ),
        ({"claimName": "mine"}, "worker", "the volume of checkpoint claim mine is tied to a node"),
        # A parameter server mounts no checkpoint: whatever holds it is not the claim.
        ({"storage": {"size": "1Gi"}}, "ps", None),
        (None, "chief", None),
    ],
)
@pytest.mark.parametrize("release", sorted(CONFLICTS))
def test_a_pod_held_by_its_checkpoint_volume_says_why(checkpoint, rt, says, release):
    message, words = CONFLICTS[release]
    spec = {"Chief": 1, "PS": 1, "Worker": 1}
    extra = {"checkpoint": checkpoint} if checkpoint else {}
    run = Run(tfjob(replicas=spec, **extra))
    run.step()
    pods = running("mnist", spec)
    index = {"chief": 0, "ps": 1, "worker": 2}[rt]
    pods[index] = unschedulable(rt, 0, message)
    run.step(*pods)
    why = run.status["waiting"][f"mnist-{rt}-0"]
    assert why.startswith("Unschedulable: ")
    if says is None:
        assert why == f"Unschedulable: {message}"
    else:
        assert why.startswith(f"Unschedulable: {says}"), why
        assert why.endswith(f"(the scheduler: {words})"), why
