"""What a cluster user does, end to end: the images built from the Dockerfile, the operator
installed by its Helm chart and running in a pod, the shipped examples applied with kubectl,
and the disturbances any cluster has (a pod deleted, the operator's pod replaced, a node
cordoned). Everything here goes through kubectl, so it runs on kind too (tests/e2e/kind.sh).

The node (tests/support/node.py) is containerd + runc, kubelet, kube-scheduler and kube-proxy,
with a CNI bridge, cluster DNS and a volume provisioner; `make cluster` brings up the same.
"""

from __future__ import annotations

import re
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.node.helpers import (
    POD_WAIT,
    TRAIN_WAIT,
    assert_scaled_down,
    children,
    claim_files,
    conditions,
    container,
    fast_job,
    follow,
    has_exited,
    is_true,
    leader,
    newest_step,
    pod,
    wait_ended,
)
from tests.support.cluster import NAMESPACE, Cluster
from tests.support.jobs import example
from tests.support.kube import wait_for
from tfjob_operator import naming

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "manifests" / "examples"
UNDISTURBED = [("Created", "True"), ("Running", "False"), ("Succeeded", "True")]

pytestmark = pytest.mark.node


def operator_pods(cluster: Cluster) -> list[str]:
    """The names of the operator's pods that are not going away."""
    pods = cluster.get("pods", "-n", NAMESPACE)["items"]
    return [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]


def operator_pod(cluster: Cluster) -> dict:
    names = operator_pods(cluster)
    assert len(names) == 1, names
    return cluster.get("pod", names[0], "-n", NAMESPACE)


def test_operator_runs_from_the_chart_ready_with_metrics(cluster: Cluster) -> None:
    pod_ = operator_pod(cluster)
    ready = [c for c in pod_["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    spec = pod_["spec"]["containers"][0]
    assert spec["image"].startswith("tfjob-operator/operator:")
    assert spec["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert pod_["spec"]["serviceAccountName"] != "default"
    # /metrics through kubectl port-forward, as a user would look.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    forward = subprocess.Popen(
        [str(cluster.tools.kubectl), "--kubeconfig", str(cluster.kubeconfig), "port-forward",
         "-n", NAMESPACE, f"pod/{pod_['metadata']['name']}", f"{port}:metrics"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:

        def scrape() -> str:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    return r.read().decode()
            except OSError:
                return ""

        body = wait_for(scrape, 60, "/metrics through port-forward")
        assert "tfjob_operator_" in body
    finally:
        forward.terminate()
        forward.wait(10)


@pytest.mark.parametrize("file", ["mnist-ps", "mnist-sync"])
def test_example_trains_to_succeeded_on_the_volume(
    cluster: Cluster, namespace: str, file: str
) -> None:
    """The shipped example with only its step count lowered, as README shows."""
    text = (EXAMPLES / f"{file}.yaml").read_text()
    steps = re.search(r"--steps=(\d+)", text)
    assert steps, f"{file} sets no --steps"
    cluster.apply(text.replace(steps.group(0), "--steps=300"), namespace)
    first = leader(yaml.safe_load(text))
    # Follow the leader's log as a user does, until its container ends.
    log = follow(cluster, first, namespace).wait()
    assert newest_step(log) == 300, log[-2000:]
    assert "TFJOB_RESULT" in log, log[-2000:]
    status = wait_ended(cluster, file, namespace)
    assert conditions(status) == UNDISTURBED, status
    assert not status.get("failure"), status
    claim = naming.checkpoint_claim_name(file)
    assert cluster.get("pvc", claim, "-n", namespace)["status"]["phase"] == "Bound"
    assert_scaled_down(cluster, file, namespace)
    files = claim_files(cluster, claim, namespace)
    assert "checkpoint" in files and any(p.endswith(".index") for p in files), sorted(files)
    assert any(p.startswith("logs/train/events.out.tfevents.") for p in files), sorted(files)
    # The export, written by the trainer image's user, not root.
    uid, size = files["export/model.keras"]
    assert uid == 65532 and size > 0
    # Deleting the TFJob takes its children with it (owner references, no finalizer).
    assert len(children(cluster, file, namespace)) >= 3
    cluster.kubectl("delete", "tfjob", file, "-n", namespace, "--timeout=120s")
    wait_for(lambda: not children(cluster, file, namespace), 120, f"{file}'s children gone")


def test_gpu_example_schedules_against_the_advertised_capacity(
    cluster: Cluster, namespace: str
) -> None:
    body = example("mnist-multi-gpu", "mnist-multi-gpu", ["--steps=20"])
    cluster.apply(body, namespace)
    started = wait_for(
        lambda: (
            (p := pod(cluster, "mnist-multi-gpu-worker-0", namespace))
            and p["status"].get("phase") in ("Running", "Succeeded")
            and p
        ),
        POD_WAIT,
        "the GPU worker started",
    )
    limits = started["spec"]["containers"][0]["resources"]["limits"]
    gpus = int(limits["nvidia.com/gpu"])
    node = cluster.get("node", started["spec"]["nodeName"])
    assert int(node["status"]["allocatable"]["nvidia.com/gpu"]) >= gpus

    # More GPUs than the node has: the pod stays Pending, and the TFJob says why.
    body["metadata"]["name"] = "too-many-gpus"
    spec = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    spec["resources"]["limits"]["nvidia.com/gpu"] = 1000  # an integer, as Kubeflow writes it
    cluster.apply(body, namespace)
    # The scheduler's message changes as the job's claim binds: wait for the one about GPUs.
    waiting = wait_for(
        lambda: (
            (w := cluster.tfjob_status("too-many-gpus", namespace).get("waiting"))
            and "nvidia.com/gpu" in str(w)
            and w
        ),
        POD_WAIT,
        "status.waiting of too-many-gpus to name the GPUs",
    )
    assert list(waiting) == ["too-many-gpus-worker-0"]
    assert waiting["too-many-gpus-worker-0"].startswith("Unschedulable: ")
    assert "nvidia.com/gpu" in waiting["too-many-gpus-worker-0"]


def test_worker_exit_1_under_never_fails_with_exit_code_and_pod(
    cluster: Cluster, namespace: str
) -> None:
    # Worker 1 fails at once; worker 0 would run for minutes. The index comes from the
    # pod-index label through the downward API, as on Kubernetes >= 1.28 (else the hostname).
    script = (
        "import os, sys, time; "
        "i = os.environ.get('TFJOB_TASK_INDEX') or os.environ['HOSTNAME'].rsplit('-', 1)[1]; "
        "sys.exit(1) if i == '1' else time.sleep(600)"
    )
    job = fast_job("never", "mnist-sync")
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    worker["restartPolicy"] = "Never"
    worker["template"]["spec"]["containers"][0].update(command=["python", "-c", script], args=[])
    cluster.apply(job, namespace)
    status = wait_ended(cluster, "never", namespace, want="Failed", timeout=POD_WAIT)
    assert status["failure"] == {
        "replicaType": "Worker",
        "pod": "never-worker-1",
        "exitCode": 1,
        "reason": "Error",
    }, status
    assert "never-worker-1 exited with code 1" in status["conditions"][-1]["message"]
    assert_scaled_down(cluster, "never", namespace)


def test_worker_pod_deleted_mid_training(cluster: Cluster, namespace: str) -> None:
    cluster.apply(fast_job("wdel", "mnist-ps", "--steps=1500"), namespace)
    chief = follow(cluster, "wdel-chief-0", namespace)
    wait_for(lambda: newest_step(chief.text) >= 100, TRAIN_WAIT, "the chief at step 100")
    before = pod(cluster, "wdel-worker-1", namespace)["metadata"]["uid"]
    cluster.kubectl("delete", "pod", "wdel-worker-1", "-n", namespace, "--wait=false")
    wait_for(
        lambda: (
            (p := pod(cluster, "wdel-worker-1", namespace))
            and p["metadata"]["uid"] != before
            and "running" in container(p).get("state", {})
        ),
        POD_WAIT,
        "a new worker-1 running",
    )
    status = wait_ended(cluster, "wdel", namespace)
    assert not status.get("failure"), status
    assert newest_step(chief.wait()) >= 1500, chief.text[-2000:]  # lost closures run again


@pytest.mark.parametrize("down_until", ["training-continues", "chief-finished"])
def test_operator_pod_replaced_mid_job_reaches_the_same_end(
    cluster: Cluster, namespace: str, down_until: str
) -> None:
    """The operator's pod goes mid-job. Either its Deployment replaces it at once while
    training goes on, or the operator stays away (scaled to 0) until the chief has finished.
    Afterwards the job ends as an undisturbed one does, with the very same children."""
    cluster.apply(fast_job("opkill", "mnist-ps", "--steps=1500"), namespace)
    chief = follow(cluster, "opkill-chief-0", namespace)
    wait_for(lambda: newest_step(chief.text) >= 50, TRAIN_WAIT, "the chief at step 50")
    running = cluster.tfjob_status("opkill", namespace)
    assert conditions(running) == [("Created", "True"), ("Running", "True")], running
    before = children(cluster, "opkill", namespace)
    assert len(before) == 7, before  # 3 StatefulSets, 3 Services, 1 claim
    [old] = operator_pods(cluster)

    if down_until == "chief-finished":
        cluster.kubectl("scale", "deployment", "--all", "-n", NAMESPACE, "--replicas=0")
        try:
            # Away means gone: a terminating operator may still write.
            wait_for(
                lambda: not cluster.get("pods", "-n", NAMESPACE)["items"],
                POD_WAIT,
                "the operator's pod gone",
            )
            running = cluster.tfjob_status("opkill", namespace)
            assert conditions(running) == [("Created", "True"), ("Running", "True")], running
            wait_for(
                lambda: has_exited(cluster, "opkill-chief-0", namespace),
                TRAIN_WAIT,
                "the chief to finish while the operator is away",
            )
            assert cluster.tfjob_status("opkill", namespace) == running  # nobody wrote status
        finally:
            cluster.kubectl("scale", "deployment", "--all", "-n", NAMESPACE, "--replicas=1")
    else:
        cluster.kubectl("delete", "pod", old, "-n", NAMESPACE, "--wait=false")
    wait_for(
        lambda: (names := operator_pods(cluster)) and names != [old] and len(names) == 1,
        POD_WAIT,
        "a new operator pod",
    )
    status = wait_ended(cluster, "opkill", namespace)
    assert conditions(status) == UNDISTURBED, status
    assert not status.get("failure"), status
    assert status["restarts"] == 0, status
    assert children(cluster, "opkill", namespace) == before
    assert_scaled_down(cluster, "opkill", namespace)
    # At least the target: a transient gRPC failure makes the coordinator run a closure again.
    assert newest_step(chief.wait()) >= 1500, chief.text[-2000:]


def test_cordoned_node_keeps_a_deleted_worker_pending_and_says_why(
    cluster: Cluster, namespace: str
) -> None:
    # One worker: without it the chief's training waits, so the job cannot end meanwhile.
    job = fast_job("cordon", "mnist-ps", "--steps=1500")
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1
    cluster.apply(job, namespace)
    chief = follow(cluster, "cordon-chief-0", namespace)
    wait_for(lambda: newest_step(chief.text) >= 50, TRAIN_WAIT, "the chief at step 50")
    node = pod(cluster, "cordon-worker-0", namespace)["spec"]["nodeName"]
    cluster.kubectl("cordon", node)
    try:
        cluster.kubectl("delete", "pod", "cordon-worker-0", "-n", namespace, "--wait=false")
        waiting = wait_for(
            lambda: cluster.tfjob_status("cordon", namespace).get("waiting"),
            POD_WAIT,
            "status.waiting of cordon",
        )
        assert list(waiting) == ["cordon-worker-0"], waiting
        assert waiting["cordon-worker-0"].startswith("Unschedulable: "), waiting
        status = cluster.tfjob_status("cordon", namespace)
        assert not is_true(status, "Succeeded") and not is_true(status, "Failed"), status
    finally:
        cluster.kubectl("uncordon", node)
    status = wait_ended(cluster, "cordon", namespace)
    assert "waiting" not in status, status
    assert newest_step(chief.wait()) >= 1500, chief.text[-2000:]  # lost closures run again
