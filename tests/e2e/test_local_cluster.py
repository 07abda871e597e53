"""mnist-ps end to end on the local control plane, its pods run by a node agent.

The real kube-apiserver, controller-manager and operator make the StatefulSets, Services, claim
and pods; `NodeAgent` runs every pod as TensorFlow processes in network namespaces that reach
each other through their pod DNS names, so the job trains, checkpoints and finishes for real.
Needs root (network namespaces).
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.kube import wait_for
from tests.support.nodeagent import NodeAgent, network_namespaces_work

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "manifests" / "examples" / "mnist-ps.yaml"
FAST = ["--dataset=digits", "--steps=200", "--batch-size=32", "--log-every=50"]
FAST += ["--checkpoint-every=50"]
DEADLINE = 240

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def _needs_network_namespaces() -> None:
    why = network_namespaces_work()
    if why:
        pytest.skip(f"the node agent runs pods in network namespaces: {why}")


@pytest.fixture
def agent(core, ns, tmp_path) -> Iterator[NodeAgent]:
    node = NodeAgent(core, ns, tmp_path / "node")
    try:
        node.start()
        yield node
    finally:
        node.stop()
        print(f"node agent workdir: {node.workdir}")


def fast_job(name: str) -> dict[str, Any]:
    job = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    job["metadata"]["name"] = name
    for rs in job["spec"]["tfReplicaSpecs"].values():
        for c in rs["template"]["spec"]["containers"]:
            c["args"] = [*c.get("args", []), *FAST]
    return job


def tfjob(custom, ns: str, name: str) -> dict[str, Any]:
    return custom.get_namespaced_custom_object("tfjob.dev", "v1", ns, "tfjobs", name)


def wait_finished(custom, agent: NodeAgent, ns: str, name: str) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        assert not agent.errors, agent.errors
        job = tfjob(custom, ns, name)
        conds = {c["type"]: c["status"] for c in job.get("status", {}).get("conditions", [])}
        if conds.get("Failed") == "True":
            raise AssertionError(f"{name} failed: {job['status']}\n{agent.log(f'{name}-chief-0')}")
        return job if conds.get("Succeeded") == "True" else None

    try:
        return wait_for(finished, DEADLINE, f"{name} to succeed", interval=0.5)
    except AssertionError:
        for pod in sorted(agent.pods):
            print(f"----- {pod} -----\n{agent.log(pod)[-3000:]}")
        raise


def assert_scaled_down(apps, ns: str, name: str) -> None:
    def down() -> bool:
        sets = apps.list_namespaced_stateful_set(ns, label_selector=f"tfjob.dev/job-name={name}")
        return bool(sets.items) and all(s.spec.replicas == 0 for s in sets.items)

    wait_for(down, 30, f"{name}'s StatefulSets scaled to 0")


def test_mnist_ps_trains_to_success(kubectl, core, apps, custom, operator, ns, agent) -> None:
    started = time.monotonic()
    kubectl.apply(fast_job("mnist-ps"), namespace=ns)
    job = wait_finished(custom, agent, ns, "mnist-ps")
    print(f"mnist-ps succeeded after {time.monotonic() - started:.0f}s")

    conditions = job["status"]["conditions"]
    assert [(c["type"], c["status"]) for c in conditions] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Succeeded", "True"),
    ], conditions
    assert not job["status"].get("failure"), job["status"]

    volume = agent.pvc_dir("mnist-ps-checkpoints")
    assert list(volume.glob("ckpt-*.index")), sorted(p.name for p in volume.iterdir())
    assert (volume / "export" / "model.keras").is_file()
    assert list((volume / "logs" / "train").rglob("events.out.tfevents.*"))
    assert_scaled_down(apps, ns, "mnist-ps")

    chief = agent.log("mnist-ps-chief-0", 0)
    assert re.search(r"step 200\b", chief), chief[-2000:]
    wait_for(lambda: not agent.pods, 30, "every pod of mnist-ps stopped")


def test_worker_killed_mid_training_is_restarted(
    kubectl, core, apps, custom, operator, ns, agent
) -> None:
    kubectl.apply(fast_job("chaos"), namespace=ns)
    wait_for(
        lambda: re.search(r"step 50\b", agent.log("chaos-chief-0", 0)),
        DEADLINE,
        "the chief to log step 50",
        interval=0.2,
    )
    agent.kill("chaos-worker-1")
    wait_for(
        lambda: agent.pods["chaos-worker-1"].restarts >= 1,
        30,
        "the node agent to restart worker-1",
    )
    assert agent.exits["chaos-worker-1"][0] == 137  # SIGKILL

    job = wait_finished(custom, agent, ns, "chaos")
    status = job["status"]
    assert status["restarts"] >= 1, status
    assert status["replicaStatuses"]["Worker"]["restarts"] >= 1, status
    assert list(agent.pvc_dir("chaos-checkpoints").glob("ckpt-*.index"))
    assert_scaled_down(apps, ns, "chaos")


def test_worker_exit_1_under_never_fails_with_exit_code_and_pod(
    kubectl, custom, apps, operator, ns, agent
) -> None:
    # Worker 1 fails at once; worker 0 would run for minutes. The index comes from the
    # pod-index label through the downward API, as on Kubernetes >= 1.28.
    script = (
        "import os, sys, time; "
        "sys.exit(1) if os.environ['TFJOB_TASK_INDEX'] == '1' else time.sleep(600)"
    )
    job = {
        "apiVersion": "tfjob.dev/v1",
        "kind": "TFJob",
        "metadata": {"name": "never"},
        "spec": {
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": 2,
                    "restartPolicy": "Never",
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "tensorflow",
                                    "image": "python:3.11",
                                    "command": ["python", "-c", script],
                                },
                            ]
                        }
                    },
                }
            }
        },
    }
    kubectl.apply(job, namespace=ns)

    def failed() -> dict[str, Any] | None:
        status = tfjob(custom, ns, "never").get("status", {})
        return (
            status
            if any(
                c["type"] == "Failed" and c["status"] == "True"
                for c in status.get("conditions", [])
            )
            else None
        )

    status = wait_for(failed, 60, "the job to fail", interval=0.3)
    assert status["failure"] == {
        "replicaType": "Worker",
        "pod": "never-worker-1",
        "exitCode": 1,
        "reason": "Error",
    }, status
    assert "never-worker-1 exited with code 1" in status["conditions"][-1]["message"]
    assert_scaled_down(apps, ns, "never")
