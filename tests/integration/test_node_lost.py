"""A pod whose node stopped answering, on the real API server: the pod as Kubernetes' node
controller leaves it, marked for deletion as its taint manager does; the operator says so at
once and, past runPolicy.nodeLostTimeoutSeconds, deletes it for good so that its StatefulSet
makes it again. (The same against real kubelets: tests/node/test_node_lost_two_nodes.py.)"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import UTC, datetime

import kubernetes
import pytest

from tests.integration.user_view import CHILD_WAIT
from tfjob_operator.rules import status as st
from tfjob_testbed.core.jobs import container_status, tfjob
from tfjob_testbed.core.kube import wait_for


@pytest.fixture
def node(core, ns) -> Iterator[str]:
    """A Node object with no kubelet behind it (so the pod GC keeps pods bound to it)."""
    name = "lost-" + hashlib.sha1(ns.encode()).hexdigest()[:8]
    core.create_node({"metadata": {"name": name}})
    yield name
    core.delete_node(name)


def bind(core, ns, pod, node):
    body = {"metadata": {"name": pod}, "target": {"kind": "Node", "name": node}}
    # The client cannot parse the Status the binding subresource answers: read it raw.
    core.create_namespaced_pod_binding(pod, ns, body, _preload_content=False)


def report(core, ns, pod, ready: bool):
    """The pod's status: its container running and ready, as its kubelet last said, and its
    Ready condition as given (False: what the node controller writes, MarkPodsNotReady)."""
    now = st.timestamp(datetime.now(UTC))
    body = {
        "status": {
            "phase": "Running",
            "containerStatuses": [container_status()],
            "conditions": [
                {"type": "Ready", "status": str(ready), "lastTransitionTime": now},
            ],
        }
    }
    core.patch_namespaced_pod_status(pod, ns, body)


def uid(core, ns, pod):
    try:
        return core.read_namespaced_pod(pod, ns).metadata.uid
    except kubernetes.client.ApiException as e:
        if e.status == 404:
            return None
        raise


@pytest.mark.smoke
def test_a_pod_on_a_lost_node_is_named_then_replaced_and_counted(job, core, ns, node):
    body = tfjob(
        replicas={"Chief": 1, "Worker": 2},
        restart_policy="OnFailure",
        run_policy={"nodeLostTimeoutSeconds": 3},
    )
    name = job.create(body)
    for pod in job.wait_pods(name, 3):
        bind(core, ns, pod, node)
        report(core, ns, pod, ready=True)
    job.wait_state(name, "Running")
    lost = "mnist-worker-1"
    old = uid(core, ns, lost)
    report(core, ns, lost, ready=False)
    # What the taint manager does after the pod's toleration: a deletion only the kubelet that
    # stopped answering could complete.
    core.delete_namespaced_pod(lost, ns)
    assert uid(core, ns, lost) == old, "no kubelet: the pod stays Terminating"

    waiting = wait_for(
        lambda: (job.status(name).get("waiting") or {}).get(lost),
        CHILD_WAIT,
        "the lost pod in status.waiting",
    )
    assert waiting.startswith(f"NodeLost: node {node} stopped answering")
    (event,) = job.wait_event(name, "NodeLost")
    assert event[0] == "Warning" and lost in event[2] and node in event[2]

    # Past the timeout: gone for good, and made again by its StatefulSet.
    new = wait_for(
        lambda: (u := uid(core, ns, lost)) not in (None, old) and u,
        CHILD_WAIT,
        "the lost pod replaced by a new one",
    )
    status = job.status(name)
    assert status["replicaStatuses"]["Worker"]["restarts"] == 1
    assert status["restarts"] == 1
    (restarting,) = job.wait_event(name, "TFJobRestarting")
    assert restarting[0] == "Warning" and f"{lost} was lost with node {node}" in restarting[2]

    # The successor starts on a node that answers: running again, counted once.
    report(core, ns, lost, ready=True)
    job.wait_state(name, "Running")
    status = job.status(name)
    assert "waiting" not in status and status["restarts"] == 1
    assert uid(core, ns, lost) == new
