"""What a cluster user does, end to end: the images built from the Dockerfile, the operator
installed by its Helm chart and running in a pod, the shipped examples applied with kubectl,
and the disturbances any cluster has (a pod deleted, the operator's pod replaced, a node
cordoned). Everything here goes through kubectl, so it runs on kind too (tests/e2e/kind.sh).

The node (tfjob_testbed.nodes.node) is containerd + runc, kubelet, kube-scheduler and kube-proxy,
with a CNI bridge, cluster DNS and a volume provisioner; `make cluster` brings up the same.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from tests.node.cluster_reads import (
    LEASE_DURATION,
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
    holder_pod,
    is_true,
    job_pods,
    leader,
    lease,
    lease_holder,
    newest_step,
    operator_pods,
    pod,
    wait_ended,
)
from tfjob_operator.rules import naming
from tfjob_testbed.core.jobs import example
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.core.procs import free_port
from tfjob_testbed.operator_cluster import NAMESPACE, OperatorCluster

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "manifests" / "examples"
UNDISTURBED = [("Created", "True"), ("Running", "False"), ("Succeeded", "True")]

pytestmark = pytest.mark.node


def scrape(cluster: OperatorCluster, pod_name: str) -> str:
    """/metrics of one operator pod, through kubectl port-forward as a user would look."""
    port = free_port()
    forward = subprocess.Popen(
        [str(cluster.tools.kubectl), "--kubeconfig", str(cluster.kubeconfig), "port-forward",
         "-n", NAMESPACE, f"pod/{pod_name}", f"{port}:metrics"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:

        def get() -> str:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    return r.read().decode()
            except OSError:
                return ""

        return wait_for(get, 60, f"/metrics of {pod_name} through port-forward")
    finally:
        forward.terminate()
        forward.wait(10)


def test_operator_runs_from_the_chart_two_replicas_one_leader(cluster: OperatorCluster) -> None:
    names = wait_for(
        lambda: len(n := operator_pods(cluster)) == 2 and n, POD_WAIT, "two operator pods"
    )
    for name in names:
        pod_ = cluster.get("pod", name, "-n", NAMESPACE)
        ready = [c for c in pod_["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", name  # the standby is Ready too
        spec = pod_["spec"]["containers"][0]
        assert spec["image"].startswith("tfjob-operator/operator:")
        assert spec["readinessProbe"]["httpGet"]["path"] == "/healthz"
        assert pod_["spec"]["serviceAccountName"] != "default"
    pdb = cluster.get("pdb", "-n", NAMESPACE)["items"]
    assert [p["spec"]["minAvailable"] for p in pdb] == [1]
    leader_pod = holder_pod(wait_for(lambda: lease_holder(cluster), 60, "a leader"))
    assert leader_pod in names
    for name in names:
        body = scrape(cluster, name)
        want = 1.0 if name == leader_pod else 0.0
        assert re.search(rf"^tfjob_operator_leader {want}$", body, re.MULTILINE), name


@pytest.mark.parametrize("file", [pytest.param("mnist-ps", marks=pytest.mark.smoke), "mnist-sync"])
def test_example_trains_to_succeeded_on_the_volume(
    cluster: OperatorCluster, namespace: str, file: str
) -> None:
    """The shipped example with only its step count lowered, as docs/install.md shows."""
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


@pytest.mark.smoke
def test_a_succeeded_jobs_pods_go_within_seconds_whatever_their_grace_period(
    cluster: OperatorCluster, namespace: str
) -> None:
    """The chief's exit 0 ends the job, and the kubelet runs its container again (a
    StatefulSet's pods always restart) as the scale-down comes: that run, sent SIGTERM before
    it could set a handler (PID 1 ignores it then), held its pod, node and GPU for the whole
    grace period. A task that is done goes in seconds."""
    grace = 600
    job = fast_job("done", "mnist-ps")
    job["spec"].setdefault("runPolicy", {})["terminationGracePeriodSeconds"] = grace
    cluster.apply(job, namespace)
    wait_ended(cluster, "done", namespace)
    wait_for(
        lambda: not job_pods(cluster, namespace, "done"),
        grace / 5,
        f"every pod of the Succeeded job gone, well within its {grace} s grace period",
    )


def test_gpu_example_schedules_against_the_advertised_capacity(
    cluster: OperatorCluster, namespace: str
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
    cluster: OperatorCluster, namespace: str
) -> None:
    # Worker 1 fails at once; worker 0 would run for minutes. The index comes from the
    # pod-index label through the downward API.
    script = (
        "import os, sys, time; "
        "sys.exit(1) if os.environ['TFJOB_TASK_INDEX'] == '1' else time.sleep(600)"
    )
    job = fast_job("never", "mnist-sync")
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    worker["restartPolicy"] = "Never"
    worker["template"]["spec"]["containers"][0].update(command=["python", "-c", script], args=[])
    # Its sleeping worker 0, PID 1 with no SIGTERM handler, waits out the grace period.
    job["spec"].setdefault("runPolicy", {})["terminationGracePeriodSeconds"] = 5
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


def test_worker_pod_deleted_mid_training(cluster: OperatorCluster, namespace: str) -> None:
    # 6000 steps: the job must outlast the deleted worker's linger (it serves for its chief a
    # few seconds) and the replacement pod's start, even on a busy machine.
    cluster.apply(fast_job("wdel", "mnist-ps", "--steps=6000"), namespace)
    chief = follow(cluster, "wdel-chief-0", namespace)
    chief.until(lambda t: newest_step(t) >= 100, "the chief at step 100")
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
    status = wait_ended(cluster, "wdel", namespace, log=chief)
    assert not status.get("failure"), status
    # The lost worker's closures run again, counted once: the exact target.
    assert newest_step(chief.wait()) == 6000, chief.text[-2000:]


@pytest.mark.parametrize("fault", ["leader-deleted", "leader-killed", "all-away"])
def test_operator_leader_lost_mid_job_reaches_the_same_end(
    cluster: OperatorCluster, namespace: str, fault: str, request: pytest.FixtureRequest
) -> None:
    """The operator's leader goes mid-job: its pod deleted (it hands the Lease over as it
    stops), its container killed (the Lease runs out), or every replica away (scaled to 0)
    until the chief has finished. The standby takes over within the lease duration, nothing
    is written by the replica that lost the Lease, and the job ends as an undisturbed one does,
    with the very same children."""
    cluster.apply(fast_job("opkill", "mnist-ps", "--steps=1500"), namespace)
    chief = follow(cluster, "opkill-chief-0", namespace)
    chief.until(lambda t: newest_step(t) >= 50, "the chief at step 50")
    running = cluster.tfjob_status("opkill", namespace)
    assert conditions(running) == [("Created", "True"), ("Running", "True")], running
    before = children(cluster, "opkill", namespace)
    assert len(before) == 7, before  # 3 StatefulSets, 3 Services, 1 claim
    old = lease_holder(cluster)
    assert holder_pod(old) in operator_pods(cluster)

    if fault == "all-away":
        cluster.kubectl("scale", "deployment", "--all", "-n", NAMESPACE, "--replicas=0")
        try:
            # Away means gone: a terminating operator may still write (an ended one cannot).
            wait_for(
                lambda: (
                    not [
                        p
                        for p in cluster.get("pods", "-n", NAMESPACE)["items"]
                        if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
                    ]
                ),
                POD_WAIT,
                "the operator's pods gone",
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
            cluster.kubectl("scale", "deployment", "--all", "-n", NAMESPACE, "--replicas=2")
    else:
        if fault == "leader-killed":
            node = request.getfixturevalue("node")  # containerd's kill: the real node only
            lost = time.monotonic()
            leader_pod = pod(cluster, holder_pod(old), NAMESPACE)
            node.kill_container(container(leader_pod, "operator")["containerID"])
        else:
            lost = time.monotonic()
            cluster.kubectl("delete", "pod", holder_pod(old), "-n", NAMESPACE, "--wait=false")
        new = wait_for(
            lambda: (h := lease_holder(cluster)) != old and h, LEASE_DURATION + 10, "a new leader"
        )
        handover = time.monotonic() - lost
        assert handover <= LEASE_DURATION + 1.0, f"{handover:.1f}s to hand the Lease over"
        assert holder_pod(new) != holder_pod(old) or fault == "leader-killed"
        print(f"Lease handed over {handover:.1f}s after the leader was {fault.split('-')[1]}")
    wait_for(lambda: len(operator_pods(cluster)) == 2, POD_WAIT, "two operator pods again")
    status = wait_ended(cluster, "opkill", namespace, log=chief)
    assert conditions(status) == UNDISTURBED, status
    assert not status.get("failure"), status
    assert status["restarts"] == 0, status
    assert children(cluster, "opkill", namespace) == before
    assert_scaled_down(cluster, "opkill", namespace)
    # At least the target: a transient gRPC failure makes the coordinator run a closure again.
    assert newest_step(chief.wait()) >= 1500, chief.text[-2000:]
    if cluster.node is not None and fault != "all-away":
        taken = datetime.fromisoformat(lease(cluster)["acquireTime"].replace("Z", "+00:00"))
        late = [e for e in writes_by(cluster.node.plane.audit(), old) if received(e) >= taken]
        assert late == [], [(e["verb"], e["objectRef"]) for e in late]
        assert writes_by(cluster.node.plane.audit(), lease_holder(cluster)), "the new leader wrote"


def writes_by(audit: list[dict], identity: str) -> list[dict]:
    """Writes of one operator replica, from the API server's audit log (its user agent)."""
    return [
        e
        for e in audit
        if e.get("userAgent", "").startswith(f"tfjob-operator/{identity}")
        and e.get("verb") in ("create", "update", "patch", "delete")
    ]


def received(event: dict) -> datetime:
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))


def test_cordoned_node_keeps_a_deleted_worker_pending_and_says_why(
    cluster: OperatorCluster, namespace: str
) -> None:
    # One worker: without it the chief's training waits, so the job cannot end meanwhile.
    job = fast_job("cordon", "mnist-ps", "--steps=6000")
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1
    cluster.apply(job, namespace)
    chief = follow(cluster, "cordon-chief-0", namespace)
    chief.until(lambda t: newest_step(t) >= 50, "the chief at step 50")
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
    status = wait_ended(cluster, "cordon", namespace, log=chief)
    assert "waiting" not in status, status
    assert newest_step(chief.wait()) == 6000, chief.text[-2000:]  # lost closures count once
