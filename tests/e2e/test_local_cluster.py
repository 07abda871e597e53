"""mnist-ps end to end on the local control plane, its pods run by a node agent.

The real kube-apiserver, controller-manager and operator make the StatefulSets, Services, claim
and pods; `NodeAgent` runs every pod as TensorFlow processes in network namespaces that reach
each other through their pod DNS names, so the job trains, checkpoints and finishes for real.
Needs root (network namespaces).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.jobs import example
from tests.support.kube import wait_for
from tests.support.nodeagent import NodeAgent, network_namespaces_work

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


def fast_job(name: str, file: str = "mnist-ps", *more: str) -> dict[str, Any]:
    """The example as shipped, renamed, with small data and step counts."""
    return example(file, name, [*FAST, *more])


def leader(job: dict[str, Any]) -> str:
    """The pod that logs progress and decides success: the chief, else worker 0."""
    name, specs = job["metadata"]["name"], job["spec"]["tfReplicaSpecs"]
    return f"{name}-chief-0" if "Chief" in specs else f"{name}-worker-0"


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


@pytest.mark.parametrize(
    ("example", "sets"),
    [
        ("mnist-ps", {"chief", "ps", "worker"}),
        ("mnist-sync", {"worker"}),
    ],
)
def test_example_trains_to_success(
    kubectl, core, apps, custom, operator, ns, agent, example, sets
) -> None:
    manifest = fast_job(example, example)
    kubectl.apply(manifest, namespace=ns)
    job = wait_finished(custom, agent, ns, example)

    conditions = job["status"]["conditions"]
    assert [(c["type"], c["status"]) for c in conditions] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Succeeded", "True"),
    ], conditions
    assert not job["status"].get("failure"), job["status"]

    volume = agent.pvc_dir(f"{example}-checkpoints")
    assert list(volume.glob("ckpt-*.index")), sorted(p.name for p in volume.iterdir())
    assert (volume / "export" / "model.keras").is_file()
    assert list((volume / "logs" / "train").rglob("events.out.tfevents.*"))
    found = apps.list_namespaced_stateful_set(ns, label_selector=f"tfjob.dev/job-name={example}")
    assert {s.metadata.name.removeprefix(f"{example}-") for s in found.items} == sets
    assert_scaled_down(apps, ns, example)

    log = agent.log(leader(manifest), 0)
    assert re.search(r"step 200\b", log), log[-2000:]
    assert "TFJOB_RESULT" in log, log[-2000:]
    wait_for(lambda: not agent.pods, 30, f"every pod of {example} stopped")


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


def chief_step(agent: NodeAgent, pod: str, restart: int = 0) -> int:
    """The newest step the pod's container logged in the given run, 0 before the first."""
    steps = re.findall(r"^step (\d+)\b", agent.log(pod, restart), re.MULTILINE)
    return int(steps[-1]) if steps else 0


def test_chief_killed_mid_training_resumes_from_checkpoint(
    kubectl, apps, custom, operator, ns, agent
) -> None:
    manifest = fast_job("chief", "mnist-ps", "--steps=800", "--checkpoint-every=100")
    kubectl.apply(manifest, namespace=ns)
    state = agent.pvc_dir("chief-checkpoints") / "checkpoint"  # written after the checkpoint

    def newest_checkpoint() -> int | None:
        named = re.search(r'^model_checkpoint_path: ".*?ckpt-(\d+)"', state.read_text(), re.M)
        return int(named.group(1)) if named else None

    wait_for(state.exists, DEADLINE, "the chief's first checkpoint", interval=0.1)
    saved = wait_for(newest_checkpoint, 10, "the checkpoint state to name one", interval=0.1)
    agent.kill("chief-chief-0")
    wait_for(
        lambda: agent.pods["chief-chief-0"].restarts >= 1,
        30,
        "the node agent to restart the chief",
    )
    assert agent.exits["chief-chief-0"][0] == 137, agent.exits

    job = wait_finished(custom, agent, ns, "chief")
    log = agent.log("chief-chief-0", 1)
    restored = re.search(r"restored \S+ckpt-(\d+) at step (\d+)", log)
    assert restored, log[-3000:]
    at = int(restored.group(2))
    assert at == int(restored.group(1)) >= saved > 0, (saved, restored.group(0))
    assert not re.search(r"^step 0\b", log, re.MULTILINE), "the restarted chief began again"
    first = re.search(r"^step (\d+)\b", log, re.MULTILINE)
    assert first and int(first.group(1)) > at, log[-3000:]
    assert chief_step(agent, "chief-chief-0", 1) == 800
    status = job["status"]
    assert status["replicaStatuses"]["Chief"]["restarts"] >= 1, status
    assert_scaled_down(apps, ns, "chief")


def children(core, apps, ns: str, job: str) -> dict[tuple[str, str], str]:
    """Every child of the job by (kind, name), with its uid: a re-created child shows."""
    selector = f"tfjob.dev/job-name={job}"
    found = {}
    for kind, items in (
        ("StatefulSet", apps.list_namespaced_stateful_set(ns, label_selector=selector).items),
        ("Service", core.list_namespaced_service(ns, label_selector=selector).items),
        ("PersistentVolumeClaim", core.list_namespaced_persistent_volume_claim(ns).items),
    ):
        for obj in items:
            found[(kind, obj.metadata.name)] = obj.metadata.uid
    return found


@pytest.mark.parametrize("down_until", ["training-continues", "chief-finished"])
def test_operator_killed_mid_job_reaches_the_same_end(
    kubectl, core, apps, custom, operator, ns, agent, down_until
) -> None:
    """The operator crashes mid-job and comes back: while it is down training goes on (in the
    second case the chief even finishes); after it, the job ends as an undisturbed one does,
    with the very same children."""
    manifest = fast_job("opkill", "mnist-ps", "--steps=1000", "--log-every=100")
    kubectl.apply(manifest, namespace=ns)
    wait_for(
        lambda: chief_step(agent, "opkill-chief-0") >= 100,
        DEADLINE,
        "the chief to log step 100",
        interval=0.1,
    )
    running = tfjob(custom, ns, "opkill")["status"]
    assert [c["type"] for c in running["conditions"]] == ["Created", "Running"], running
    before = children(core, apps, ns, "opkill")
    assert len(before) == 7, before  # 3 StatefulSets, 3 Services, 1 claim

    operator.kill()
    try:
        if down_until == "chief-finished":
            wait_for(
                lambda: "opkill-chief-0" in agent.exits,
                DEADLINE,
                "the chief to finish while the operator is down",
            )
            assert agent.exits["opkill-chief-0"][0] == 0, agent.exits
        else:
            at = chief_step(agent, "opkill-chief-0")
            wait_for(
                lambda: chief_step(agent, "opkill-chief-0") > at,
                DEADLINE,
                "training to go on while the operator is down",
                interval=0.1,
            )
        assert tfjob(custom, ns, "opkill")["status"] == running  # nobody wrote status
    finally:
        operator.start()

    job = wait_finished(custom, agent, ns, "opkill")
    assert [(c["type"], c["status"]) for c in job["status"]["conditions"]] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Succeeded", "True"),
    ], job["status"]["conditions"]
    assert not job["status"].get("failure"), job["status"]
    assert job["status"]["restarts"] == 0, job["status"]
    assert children(core, apps, ns, "opkill") == before
    assert_scaled_down(apps, ns, "opkill")
    assert "already trained" not in agent.log("opkill-chief-0", 0)


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
