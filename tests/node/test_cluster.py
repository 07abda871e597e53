"""What a cluster user does, on a real node: the images built from the Dockerfile, the operator
installed by its Helm chart and running in a pod, the shipped examples applied with kubectl.

The node (tests/support/node.py) is containerd + runc, kubelet, kube-scheduler and kube-proxy,
with a CNI bridge, cluster DNS and a volume provisioner; `make cluster` brings up the same.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support import node as node_mod
from tests.support.cluster import NAMESPACE, Cluster, start
from tests.support.kube import wait_for
from tfjob_operator import naming

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "manifests" / "examples"
TRAIN_WAIT = 600  # a few hundred MNIST steps on 2 shared cores, plus TensorFlow's start-up
POD_WAIT = 180

pytestmark = pytest.mark.node


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    reason = node_mod.missing_prerequisites()
    if reason:
        pytest.skip(reason)
    before = node_mod.read_sysctls()
    c = start()
    try:
        yield c
    finally:
        c.node.down()
    assert node_mod.leftovers() == []
    assert node_mod.read_sysctls() == before


def example(name: str, **replace: str) -> str:
    """A shipped example as text, with the overrides README documents (e.g. a lower step count:
    `sed 's/--steps=2000/--steps=300/' manifests/examples/mnist-ps.yaml | kubectl apply -f -`)."""
    text = (EXAMPLES / name).read_text()
    for old, new in replace.items():
        assert old in text, f"{name} has no {old!r}"
        text = text.replace(old, new)
    return text


def apply(cluster: Cluster, text: str, namespace: str) -> None:
    proc = subprocess.run(
        [str(cluster.tools.kubectl), "--kubeconfig", str(cluster.kubeconfig), "apply",
         "-n", namespace, "-f", "-"],
        input=text, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def get(cluster: Cluster, *args: str) -> dict:
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def find(cluster: Cluster, *args: str) -> dict:
    """Like `get`, but {} while the object does not exist yet."""
    proc = cluster.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else {}


def tfjob_state(cluster: Cluster, name: str, namespace: str) -> dict:
    return find(cluster, "tfjob", name, "-n", namespace).get("status") or {}


def condition(status: dict, kind: str) -> bool:
    return any(c["type"] == kind and c["status"] == "True" for c in status.get("conditions") or [])


@pytest.fixture
def namespace(cluster: Cluster, request) -> Iterator[str]:
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_operator_runs_from_the_chart_ready_with_metrics(cluster: Cluster) -> None:
    pods = get(cluster, "pods", "-n", NAMESPACE)["items"]
    assert len(pods) == 1
    pod = pods[0]
    ready = [c for c in pod["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    container = pod["spec"]["containers"][0]
    assert container["image"] == "tfjob-operator/operator:0.1.0"
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert pod["spec"]["serviceAccountName"] != "default"
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    # /metrics through kubectl port-forward, as a user would look.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    forward = subprocess.Popen(
        [str(cluster.tools.kubectl), "--kubeconfig", str(cluster.kubeconfig), "port-forward",
         "-n", NAMESPACE, f"pod/{pod['metadata']['name']}", f"{port}:metrics"],
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


def test_mnist_ps_example_trains_to_succeeded_on_the_volume(
    cluster: Cluster, namespace: str
) -> None:
    apply(cluster, example("mnist-ps.yaml", **{"--steps=2000": "--steps=300"}), namespace)
    chief = "mnist-ps-chief-0"
    wait_for(
        lambda: (
            find(cluster, "pod", chief, "-n", namespace).get("status", {}).get("phase") == "Running"
        ),
        POD_WAIT,
        "the chief running",
    )
    # Follow the chief's log as a user does, until its container ends.
    logs = subprocess.run(
        [str(cluster.tools.kubectl), "--kubeconfig", str(cluster.kubeconfig), "logs", "-f",
         "-n", namespace, chief],
        capture_output=True, text=True, timeout=TRAIN_WAIT,
    ).stdout  # fmt: skip
    assert re.search(r"^step \d+, loss = ", logs, re.M), logs[-2000:]
    status = wait_for(
        lambda: (
            (s := tfjob_state(cluster, "mnist-ps", namespace)) and condition(s, "Succeeded") and s
        ),
        TRAIN_WAIT,
        "mnist-ps Succeeded",
    )
    assert not condition(status, "Failed")
    pvc = get(cluster, "pvc", naming.checkpoint_claim_name("mnist-ps"), "-n", namespace)
    assert pvc["status"]["phase"] == "Bound"
    pv = get(cluster, "pv", pvc["spec"]["volumeName"])
    volume = Path(pv["spec"]["hostPath"]["path"])
    checkpoints = list(volume.rglob("checkpoint")) + list(volume.rglob("*.index"))
    assert checkpoints, sorted(map(str, volume.rglob("*")))[:50]
    model = next(volume.rglob("export/model.keras"), None)
    assert model is not None and model.stat().st_size > 0
    # Written by the trainer image's user, not root.
    assert model.stat().st_uid == 65532


def test_gpu_example_schedules_against_the_advertised_capacity(
    cluster: Cluster, namespace: str
) -> None:
    text = example("mnist-multi-gpu.yaml", **{"--steps=2000": "--steps=20"})
    apply(cluster, text, namespace)
    pod = wait_for(
        lambda: (
            (p := find(cluster, "pod", "mnist-multi-gpu-worker-0", "-n", namespace))
            and p["status"].get("phase") in ("Running", "Succeeded")
            and p
        ),
        POD_WAIT,
        "the GPU worker started",
    )
    assert pod["spec"]["nodeName"] == node_mod.NODE_NAME
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == str(node_mod.GPUS)

    # More GPUs than the node has: the pod stays Pending, and the TFJob says why.
    body = yaml.safe_load(text)
    body["metadata"]["name"] = "too-many-gpus"
    container = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["resources"]["limits"]["nvidia.com/gpu"] = node_mod.GPUS + 1
    apply(cluster, yaml.safe_dump(body), namespace)
    waiting = wait_for(
        lambda: tfjob_state(cluster, "too-many-gpus", namespace).get("waiting"),
        POD_WAIT,
        "status.waiting of too-many-gpus",
    )
    assert list(waiting) == ["too-many-gpus-worker-0"]
    assert waiting["too-many-gpus-worker-0"].startswith("Unschedulable: ")
    assert "nvidia.com/gpu" in waiting["too-many-gpus-worker-0"]


def test_teardown_leaves_nothing_and_a_second_node_comes_up(cluster: Cluster) -> None:
    """Runs last in this module: it takes the cluster down and checks the host."""
    before = json.loads((cluster.node.dir / "host.json").read_text())
    cluster.node.down()
    assert node_mod.leftovers() == []
    assert node_mod.read_sysctls() == before["sysctls"]
    assert not Path("/sys/class/net", node_mod.BRIDGE).exists()
    for path in node_mod.FIXED_PATHS:
        assert os.path.lexists(path) == (path in before["fixed_paths"]), path
    again = node_mod.Node(cluster.node.dir)
    again.up([])
    try:
        assert again._node_ready()
    finally:
        again.down()
    assert node_mod.leftovers() == []
