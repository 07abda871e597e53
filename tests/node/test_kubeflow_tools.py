"""Kubeflow users' tools on the real node, against a second release of the chart that serves
Kubeflow's own group (`--set apiGroup=kubeflow.org`), unchanged:

- Kubeflow's Training SDK (`kubeflow-training`, in a virtualenv of its own as in a notebook:
  tfjob_testbed.addons.kubeflow_sdk) creates a TFJob object and a `train_func` job, waits for them,
  finds their pods by Kubeflow's labels, reads and follows their logs, updates and deletes them;
- every manifest of tests/data/kubeflow/ as written, only put in the test's namespace. Their
  images cannot be pulled on this machine, so each must get its children and labelled pods and
  say why they wait (or fail InvalidSpec naming the field).

Both releases run at once; each reconciles only its own group's TFJobs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.node.addons import GONE_WAIT, KUBEFLOW_API_VERSION, KUBEFLOW_CRD
from tests.node.cluster_reads import (
    FAST,
    POD_WAIT,
    RESTORED,
    STOPPED,
    TRAIN_WAIT,
    follow,
    newest_step,
)
from tfjob_operator.rules import kubeflow as kf
from tfjob_testbed.addons import kubeflow_sdk
from tfjob_testbed.core.jobs import example
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.core.paths import ROOT
from tfjob_testbed.images.podman import app_version
from tfjob_testbed.operator_cluster import OperatorCluster

pytestmark = pytest.mark.node

# kubectl's name for them: plain `tfjob` is ambiguous while both groups are served.
TFJOBS = KUBEFLOW_CRD
API_VERSION = KUBEFLOW_API_VERSION
TRAINER = f"tfjob-operator/trainer:{app_version()}"
CORPUS = sorted((ROOT / "tests" / "data" / "kubeflow").glob("*.yaml"))
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff")


# ---- reading a kubeflow.org job and its children through kubectl -----------------------------


def tfjob(cluster: OperatorCluster, name: str, namespace: str) -> dict[str, Any]:
    return cluster.get(TFJOBS, name, "-n", namespace)


def by_job(cluster: OperatorCluster, kind: str, job: str, namespace: str) -> list[dict[str, Any]]:
    """The job's children of one kind, found by Kubeflow's job-name label as its clients do."""
    selector = f"{kf.JOB_NAME}={job}"
    return cluster.get(kind, "-n", namespace, "-l", selector).get("items", [])


def names(objs: list[dict[str, Any]]) -> set[str]:
    return {o["metadata"]["name"] for o in objs}


def wait_children_gone(cluster: OperatorCluster, job: str, namespace: str) -> None:
    """Until the job's StatefulSets, Services and pods are all gone (owner references)."""

    def gone() -> bool:
        return not any(by_job(cluster, k, job, namespace) for k in ("sts", "svc", "pods"))

    wait_for(gone, GONE_WAIT, f"{job}'s StatefulSets, Services and pods gone", interval=0.5)


# ---- a. the SDK drives a whole job -----------------------------------------------------------

# What a notebook does with the SDK: build the TFJob as objects, create it, find its pods by
# replica type, index and role, read a worker's log, follow the chief's until it ends, wait for
# Succeeded, read the job back. Prints one SDK-RESULT line for the test.
SDK_WHOLE_JOB = """
import json, os, sys, time

from kubeflow.training import (
    KubeflowOrgV1ReplicaSpec, KubeflowOrgV1RunPolicy, KubeflowOrgV1TFJob,
    KubeflowOrgV1TFJobSpec, TrainingClient,
)
from kubernetes.client import V1Container, V1ObjectMeta, V1PodSpec, V1PodTemplateSpec

name, namespace, image = sys.argv[1:4]
trainer_args = json.loads(sys.argv[4])
client = TrainingClient(config_file=os.environ["KUBECONFIG"], namespace=namespace, job_kind="TFJob")


def replicas(count):
    container = V1Container(name="tensorflow", image=image, args=trainer_args)
    template = V1PodTemplateSpec(spec=V1PodSpec(containers=[container]))
    return KubeflowOrgV1ReplicaSpec(replicas=count, restart_policy="Never", template=template)


job = KubeflowOrgV1TFJob(
    api_version="kubeflow.org/v1",
    kind="TFJob",
    metadata=V1ObjectMeta(name=name, namespace=namespace),
    spec=KubeflowOrgV1TFJobSpec(
        run_policy=KubeflowOrgV1RunPolicy(clean_pod_policy=None),
        tf_replica_specs={"Chief": replicas(1), "Worker": replicas(2)},
    ),
)
client.create_job(job)


def until(check, what, timeout=300):
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.5)


def pod_names(**selector):
    return sorted(p.metadata.name for p in client.get_job_pods(name, namespace, **selector))


out = {}
# Worker pods get their replica index a moment after they exist.
out["worker_1"] = until(
    lambda: pod_names(replica_type="worker", replica_index=1), "worker 1 by its index"
)
out["worker_1_logs"] = until(
    lambda: (
        (logs := client.get_job_logs(
            name, namespace, is_master=False, replica_type="worker", replica_index=1
        )[0])
        and "role worker:1" in "".join(logs.values())
        and logs
    ),
    "worker 1's first log line",
)
out["master"] = pod_names(is_master=True)
out["chief"] = pod_names(replica_type="chief")
out["workers"] = pod_names(replica_type="worker")
out["all"] = pod_names()
# A pending pod has no log to follow: the SDK skips it. Follow the master once it runs.
until(
    lambda: all(p.status.phase != "Pending" for p in client.get_job_pods(name, is_master=True)),
    "the master pod started",
)
out["master_followed"] = client.get_job_logs(name, namespace, follow=True)[0]

done = client.wait_for_job_conditions(
    name, namespace, expected_conditions={"Succeeded"}, wait_timeout=600, polling_interval=2
)
out["waited_status"] = done.status.conditions[-1].type
out["conditions"] = [
    [c.type, c.status, c.reason] for c in client.get_job_conditions(name, namespace)
]
out["succeeded"] = client.is_job_succeeded(name, namespace)
out["failed"] = client.is_job_failed(name, namespace)
out["running"] = client.is_job_running(name, namespace)
got = client.get_job(name, namespace)
out["got"] = {
    "kind": got.kind,
    "api_version": got.api_version,
    "replicas": {rt: rs.replicas for rt, rs in got.spec.tf_replica_specs.items()},
    "chief_succeeded": got.status.replica_statuses["Chief"].succeeded,
    "ordered": got.status.start_time <= got.status.completion_time,
}
out["listed"] = sorted(j.metadata.name for j in client.list_jobs(namespace))
client.update_job(
    {"metadata": {"labels": {"team": "vision"}, "annotations": {"note": "sdk-updated"}}},
    name,
    namespace,
)
updated = client.get_job(name, namespace)
out["labels"] = updated.metadata.labels
out["annotations"] = updated.metadata.annotations
print("SDK-RESULT " + json.dumps(out))
"""

SDK_DELETE = """
import json, os, sys

from kubeflow.training import TrainingClient

name, namespace = sys.argv[1:3]
client = TrainingClient(config_file=os.environ["KUBECONFIG"], job_kind="TFJob")
client.delete_job(name, namespace)
try:
    client.get_job(name, namespace)
    gone = False
except RuntimeError:
    gone = True
listed = [j.metadata.name for j in client.list_jobs(namespace)]
print("SDK-RESULT " + json.dumps({"gone": gone, "listed": listed}))
"""


@pytest.mark.smoke
def test_training_sdk_drives_a_whole_job(
    cluster: OperatorCluster, kubeflow_operator: str, namespace: str
) -> None:
    job = "sdk-mnist"
    args = ["--strategy=multi-worker-mirrored", *FAST]
    run = kubeflow_sdk.run_script(
        SDK_WHOLE_JOB, cluster.kubeconfig, [job, namespace, TRAINER, json.dumps(args)],
        timeout=TRAIN_WAIT + POD_WAIT,
    )  # fmt: skip
    out = run.result
    assert out is not None, run.stdout[-3000:]
    chief, w0, w1 = f"{job}-chief-0", f"{job}-worker-0", f"{job}-worker-1"
    # Pods by Kubeflow's labels: replica index (patched onto each worker), type, master role.
    assert out["worker_1"] == [w1]
    assert out["master"] == [chief]  # not worker 0: the job has a Chief
    assert out["chief"] == [chief]
    assert out["workers"] == [w0, w1]
    assert out["all"] == [chief, w0, w1]
    # Worker 1's own log, found by its index: the trainer there has task index 1.
    assert list(out["worker_1_logs"]) == [w1]
    assert "role worker:1, strategy multi-worker-mirrored" in out["worker_1_logs"][w1]
    # The master's log followed to its end: the trainer's last step and its result line.
    assert list(out["master_followed"]) == [chief]
    followed = out["master_followed"][chief]
    assert "role chief:0, strategy multi-worker-mirrored" in followed, followed[-2000:]
    assert "step 300," in followed and "TFJOB_RESULT" in followed, followed[-2000:]
    assert f"[Pod {chief}]: " in run.stdout  # follow=True prints each line as it comes
    # The job as the SDK reads it.
    assert out["waited_status"] == "Succeeded"
    assert out["conditions"] == [
        ["Created", "True", "TFJobCreated"],
        ["Running", "False", "TFJobRunning"],
        ["Succeeded", "True", "TFJobSucceeded"],
    ]
    assert (out["succeeded"], out["failed"], out["running"]) == (True, False, False)
    assert out["got"] == {
        "kind": "TFJob",
        "api_version": API_VERSION,
        "replicas": {"Chief": 1, "Worker": 2},
        "chief_succeeded": 1,
        "ordered": True,
    }
    assert out["listed"] == [job]
    # update_job's merge patch, seen by the SDK and by kubectl; the finished job stays so.
    assert out["labels"] == {"team": "vision"}
    assert out["annotations"].get("note") == "sdk-updated"
    body = tfjob(cluster, job, namespace)
    assert body["metadata"]["labels"] == {"team": "vision"}
    assert [c["type"] for c in body["status"]["conditions"] if c["status"] == "True"] == [
        "Created",
        "Succeeded",
    ]

    # delete_job: the TFJob goes, and everything it owns after it.
    assert names(by_job(cluster, "sts", job, namespace)) == {f"{job}-chief", f"{job}-worker"}
    assert names(by_job(cluster, "svc", job, namespace)) == {f"{job}-chief", f"{job}-worker"}
    deleted = kubeflow_sdk.run_script(SDK_DELETE, cluster.kubeconfig, [job, namespace]).result
    assert deleted == {"gone": True, "listed": []}
    wait_children_gone(cluster, job, namespace)


# ---- the SDK resizes a running job ----------------------------------------------------------

# `update_job` as a notebook resizes a job: a merge patch of the Worker replicas. Prints one
# SDK-RESULT line with the replicas read back.
SDK_RESIZE = """
import json, os, sys

from kubeflow.training import TrainingClient

name, namespace, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = TrainingClient(config_file=os.environ["KUBECONFIG"], namespace=namespace, job_kind="TFJob")
client.update_job({"spec": {"tfReplicaSpecs": {"Worker": {"replicas": workers}}}}, name, namespace)
got = client.get_job(name, namespace)
print("SDK-RESULT " + json.dumps({rt: rs.replicas for rt, rs in got.spec.tf_replica_specs.items()}))
"""


def test_training_sdk_update_job_resizes_a_running_job_losing_no_step(
    cluster: OperatorCluster, kubeflow_operator: str, namespace: str
) -> None:
    """Workers 2 -> 3 through `update_job` mid-training: every task stops at once, the chief
    saves the step it is on, and the new cluster resumes there and ends at the exact target."""
    job, target = "sdk-resize", 6000
    body = example("mnist-ps", job, [*FAST, f"--steps={target}", "--checkpoint-every=100000"])
    body["apiVersion"] = API_VERSION
    cluster.apply(body, namespace)
    chief = f"{job}-chief-0"
    first = follow(cluster, chief, namespace)
    first.until(lambda t: newest_step(t) >= 100, "the chief at step 100")
    run = kubeflow_sdk.run_script(SDK_RESIZE, cluster.kubeconfig, [job, namespace, "3"])
    assert run.result == {"Chief": 1, "PS": 1, "Worker": 3}, run.stdout[-2000:]
    before = first.wait(POD_WAIT)
    saved = STOPPED.search(before)
    assert saved and int(saved.group(1)) >= newest_step(before), before[-3000:]
    second = follow(cluster, chief, namespace)
    status = wait_for(
        lambda: (
            (s := tfjob(cluster, job, namespace).get("status") or {}).get("completionTime") and s
        ),
        TRAIN_WAIT,
        f"{job} finished",
    )
    log = second.wait()
    restored = RESTORED.search(log)
    assert restored and restored.group(2) == saved.group(1), log[-3000:]
    assert newest_step(log) == target, log[-3000:]
    assert not status.get("failure") and status.get("restarts", 0) == 0, status
    assert status["lastStop"]["cause"] == "Resized", status
    assert status["lastStop"]["savedStep"] == int(saved.group(1)), status
    assert "Worker 2 → 3" in status["lastStop"]["message"], status


# ---- b. a train_func job -------------------------------------------------------------------

# The SDK's other way in: a Python function, shipped as source in `bash -c` and run by the
# image's `python -u`, on every worker. This one uses TensorFlow, reads TF_CONFIG and meets its
# peers at the addresses TF_CONFIG gives (worker 0 ends last, so every line is printed before
# the job succeeds and its pods go). The SDK writes the function through an unquoted heredoc:
# no dollar sign, backquote or backslash pair may appear in it.
SDK_TRAIN_FUNC = """
import json, os, sys, time

from kubeflow.training import TrainingClient


def train_func(parameters):
    import json
    import os
    import socket
    import time

    import tensorflow as tf

    # Kubernetes fills the task index in from the pod-index label: TF_CONFIG is complete JSON.
    tf_config = json.loads(os.environ["TF_CONFIG"])
    host = socket.gethostname()
    task = tf_config["task"]
    workers = tf_config["cluster"]["worker"]
    total = int(tf.reduce_sum(tf.range(parameters["n"])).numpy())
    print(
        f"{parameters['marker']} {task['type']}:{task['index']} of {len(workers)} workers, "
        f"host {host}, sum {total}",
        flush=True,
    )
    port = int(workers[task["index"]].rsplit(":", 1)[1])
    if task["index"] > 0:
        with socket.create_server(("", port)) as server:
            conn, _ = server.accept()
            with conn:
                conn.sendall(f"worker {task['index']} done".encode())
        return
    heard = []
    for peer in workers[1:]:
        address, peer_port = peer.rsplit(":", 1)
        deadline = time.monotonic() + 300
        while True:
            try:
                with socket.create_connection((address, int(peer_port)), timeout=5) as conn:
                    heard.append(conn.recv(100).decode())
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    print(f"{parameters['marker']} heard: {', '.join(heard)}", flush=True)


name, namespace, image, marker = sys.argv[1:5]
client = TrainingClient(config_file=os.environ["KUBECONFIG"], job_kind="TFJob")
client.create_job(
    name=name,
    namespace=namespace,
    train_func=train_func,
    parameters={"marker": marker, "n": 100},
    base_image=image,
    num_workers=2,
)
out = {}
deadline = time.monotonic() + 300
while True:
    pods = client.get_job_pods(name, namespace, replica_type="worker")
    if len(pods) == 2 and all(p.status.phase != "Pending" for p in pods):
        break
    if time.monotonic() > deadline:
        raise SystemExit("timed out waiting for both workers to start")
    time.sleep(0.5)
out["followed"] = client.get_job_logs(
    name, namespace, is_master=False, replica_type="worker", follow=True
)[0]
client.wait_for_job_conditions(name, namespace, wait_timeout=300, polling_interval=2)
out["succeeded"] = client.is_job_succeeded(name, namespace)
got = client.get_job(name, namespace)
spec = got.spec.tf_replica_specs["Worker"]
container = spec.template.spec.containers[0]
out["container"] = [container.name, container.image, container.command]
out["replicas"] = sorted(got.spec.tf_replica_specs)
print("SDK-RESULT " + json.dumps(out))
"""


def test_training_sdk_train_func_on_the_trainer_image(
    cluster: OperatorCluster, kubeflow_operator: str, namespace: str
) -> None:
    job, marker = "sdk-func", "sdk-train-func"
    run = kubeflow_sdk.run_script(
        SDK_TRAIN_FUNC, cluster.kubeconfig, [job, namespace, TRAINER, marker],
        timeout=TRAIN_WAIT,
    )  # fmt: skip
    out = run.result
    assert out is not None, run.stdout[-3000:]
    assert out["container"] == ["tensorflow", TRAINER, ["bash", "-c"]]
    assert out["replicas"] == ["Worker"]
    assert out["succeeded"] is True
    logs = out["followed"]
    w0, w1 = f"{job}-worker-0", f"{job}-worker-1"
    assert sorted(logs) == [w0, w1], run.stdout[-3000:]
    for i, pod_name in enumerate((w0, w1)):
        # The type and index TF_CONFIG gives this pod, the cluster's size, TensorFlow's sum.
        assert f"{marker} worker:{i} of 2 workers" in logs[pod_name], logs[pod_name]
        assert f"host {pod_name}, sum 4950" in logs[pod_name], logs[pod_name]
    # Worker 0 reached worker 1 at the address TF_CONFIG lists for it.
    assert f"{marker} heard: worker 1 done" in logs[w0], logs[w0]
    cluster.kubectl("delete", TFJOBS, job, "-n", namespace, "--timeout=120s")
    wait_children_gone(cluster, job, namespace)


# ---- c. the corpus as written ----------------------------------------------------------------

# Why pods of some manifests wait for something else than their image, on this one node.
WAITING: dict[str, tuple[str, ...]] = {
    # A nodeSelector for a GKE GPU pool that no node here matches.
    "node-selector-tolerations": ("Unschedulable",),
    # schedulerName volcano, and no volcano: the operator says so after 30 s.
    "run-policy": ("NotScheduled",),
    # 1 CPU for the PS and 1 for the worker: the operators' requests leave less than 2 free.
    "gpu-worker": (*PULL_FAILURES, "Unschedulable"),
    # 2 workers of 0.5 CPU: on kind, whose control plane runs in pods, one may not fit.
    "half-cpu": (*PULL_FAILURES, "Unschedulable"),
}
# A hostPath of type Directory that this node does not have: kubelet cannot mount it, so the
# pods stay ContainerCreating with FailedMount Events (no waiting reason to report).
FAILED_MOUNT = {"exitcode-hostpath": "/mnt/datasets"}
HOST_PATHS = ("/var/log/tfjob",)  # DirectoryOrCreate in exitcode-hostpath: made by kubelet


def _replica_pods(body: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """pod name -> (replica type, index) for every pod the manifest asks for."""
    name = body["metadata"]["name"]
    pods = {}
    for rt, spec in body["spec"]["tfReplicaSpecs"].items():
        for i in range(spec.get("replicas", 1)):
            pods[f"{name}-{rt.lower()}-{i}"] = (rt, i)
    return pods


def _master(body: dict[str, Any]) -> str:
    specs, name = body["spec"]["tfReplicaSpecs"], body["metadata"]["name"]
    chief = [
        rt for rt in ("Chief", "Master") if specs.get(rt, {}).get("replicas", 1) > 0 and rt in specs
    ]
    return f"{name}-{(chief or ['Worker'])[0].lower()}-0"


def _started(pod_: dict[str, Any]) -> bool:
    """Whether the pod's container has started (or exited) at least once."""
    statuses = (pod_.get("status") or {}).get("containerStatuses") or []
    return any(
        {"running", "terminated"} & set(s.get("state") or {})
        or (s.get("lastState") or {}).get("terminated")
        for s in statuses
    )


def _labels_ok(pod_: dict[str, Any], job: str, rt: str, index: int, master: bool) -> bool:
    """Kubeflow's labels: the template's on every pod; a PS or Worker pod's own index (and
    worker 0's role) once its container has started, when the operator patches them on."""
    labels = pod_["metadata"].get("labels") or {}
    want = {kf.JOB_NAME: job, kf.REPLICA_TYPE: rt.lower(), kf.OPERATOR_NAME: kf.OPERATOR}
    if any(labels.get(k) != v for k, v in want.items()):
        return False
    per_pod = rt.lower() in ("ps", "worker")
    if per_pod and not _started(pod_):
        return kf.REPLICA_INDEX not in labels  # not before its container starts
    if labels.get(kf.REPLICA_INDEX) != str(index):
        return False
    return (labels.get(kf.JOB_ROLE) == kf.MASTER_ROLE) == master


@pytest.fixture(scope="module")
def host_paths() -> Iterator[None]:
    """Put back the host directories a manifest's hostPath volumes made on this node."""
    before = {p: Path(p).exists() for p in HOST_PATHS}
    yield
    for p, existed in before.items():
        if not existed and Path(p).is_dir():
            shutil.rmtree(p, ignore_errors=True)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_kubeflow_manifest_as_written_gets_its_pods(
    cluster: OperatorCluster, kubeflow_operator: str, namespace: str, host_paths: None, path: Path
) -> None:
    body: dict[str, Any] = yaml.safe_load(path.read_text())
    if body["apiVersion"] != API_VERSION:  # the corpus is being turned back to its original
        body["apiVersion"] = API_VERSION
    body["metadata"]["namespace"] = namespace
    job = body["metadata"]["name"]
    cluster.apply(body, namespace)
    try:
        _check_manifest(cluster, body, namespace, path.stem)
    finally:
        _delete_at_once(cluster, job, namespace)


def _delete_at_once(cluster: OperatorCluster, job: str, namespace: str) -> None:
    """Delete the job and let its pods go without their grace period: a pod whose kubelet is
    busy pulling an image it cannot reach takes about a minute to terminate, and the next
    manifest's pods would pile up meanwhile."""
    cluster.kubectl("delete", TFJOBS, job, "-n", namespace, "--wait=false", check=False)

    def owners_gone() -> bool:
        return not any(by_job(cluster, k, job, namespace) for k in ("sts", "svc"))

    wait_for(owners_gone, GONE_WAIT, f"{job}'s StatefulSets and Services gone", interval=0.5)
    cluster.kubectl(
        "delete", "pods", "-n", namespace, "-l", f"{kf.JOB_NAME}={job}", "--grace-period=0",
        "--force", check=False,
    )  # fmt: skip
    wait_children_gone(cluster, job, namespace)


def _check_manifest(
    cluster: OperatorCluster, body: dict[str, Any], namespace: str, stem: str
) -> None:
    job = body["metadata"]["name"]

    def conditions() -> dict[str, dict[str, Any]]:
        conds = (tfjob(cluster, job, namespace).get("status") or {}).get("conditions") or []
        return {c["type"]: c for c in conds}

    conds = wait_for(conditions, 60, f"a condition on TFJob {job}")
    failed = conds.get("Failed", {})
    if failed.get("status") == "True":
        assert failed.get("reason") == "InvalidSpec", failed
        assert "spec." in failed.get("message", ""), failed
        return
    assert conds.get("Created", {}).get("status") == "True", conds

    want = _replica_pods(body)
    types = {rt.lower() for rt, _ in want.values()}
    sets = wait_for(
        lambda: (
            names(found := by_job(cluster, "sts", job, namespace)) == {f"{job}-{t}" for t in types}
            and found
        ),
        60,
        f"{job}'s StatefulSets",
    )
    for sts in sets:
        owner = sts["metadata"]["ownerReferences"][0]
        assert (owner["apiVersion"], owner["kind"], owner["name"]) == (API_VERSION, "TFJob", job)
    services = by_job(cluster, "svc", job, namespace)
    assert names(services) == {f"{job}-{t}" for t in types}
    for svc in services:
        assert svc["metadata"]["labels"][kf.REPLICA_TYPE] in types

    # Every pod, with Kubeflow's labels: the index patched on once it starts, the master role on
    # one pod (a Chief's in its template).
    master = _master(body)

    def labelled() -> list[dict[str, Any]] | None:
        pods = by_job(cluster, "pods", job, namespace)
        if names(pods) != set(want):
            return None
        ok = all(
            _labels_ok(p, job, *want[p["metadata"]["name"]], p["metadata"]["name"] == master)
            for p in pods
        )
        return pods if ok else None

    wait_for(labelled, POD_WAIT, f"{job}'s pods {sorted(want)} with Kubeflow's labels")

    if stem in FAILED_MOUNT:
        missing = FAILED_MOUNT[stem]

        def failed_mounts() -> set[str]:
            events = cluster.get("events", "-n", namespace, "--field-selector=reason=FailedMount")
            return {
                e["involvedObject"]["name"]
                for e in events.get("items", [])
                if missing in e.get("message", "")
            }

        wait_for(lambda: failed_mounts() >= set(want), POD_WAIT, f"FailedMount of {missing}")
        return

    # Running, or every pod named in status.waiting with why it cannot start.
    allowed = WAITING.get(stem, PULL_FAILURES)

    def said_why() -> dict[str, Any] | None:
        status = tfjob(cluster, job, namespace).get("status") or {}
        running = any(
            c["type"] == "Running" and c["status"] == "True" for c in status.get("conditions", [])
        )
        waiting = status.get("waiting") or {}
        why_all = set(waiting) == set(want) and all(
            w.split(":", 1)[0] in allowed for w in waiting.values()
        )
        return status if running or why_all else None

    status = wait_for(said_why, POD_WAIT, f"{job} Running or every pod waiting with a reason")
    # A gang of Kubernetes' own (1.37 with its gate, as here) is placed whole or not at all: a
    # pod the scheduler tried with its group has the pod group's word, one that fit nowhere by
    # itself its own.
    gang = {
        p["metadata"]["name"]
        for p in by_job(cluster, "pods", job, namespace)
        if p["spec"].get("schedulingGroup")
    }
    for pod_name, why in (status.get("waiting") or {}).items():
        if why.startswith("NotScheduled"):
            assert "volcano" in why, why
        elif why.startswith("Unschedulable") and pod_name in gang and "minCount" in why:
            assert f"minCount ({len(want)}) cannot be satisfied" in why, why
        elif why.startswith("Unschedulable") and stem == "node-selector-tolerations":
            assert "didn't match Pod's node affinity/selector" in why, why
        elif why.startswith("Unschedulable"):
            assert "Insufficient cpu" in why and "nvidia.com/gpu" not in why, why
        else:
            image = _image_of(body, want[pod_name][0])
            assert image.split(":")[0].split("/")[-1] in why, (pod_name, why)


def _image_of(body: dict[str, Any], rt: str) -> str:
    """The image of the replica type's TensorFlow container (`tensorflow`, or the only one)."""
    containers = body["spec"]["tfReplicaSpecs"][rt]["template"]["spec"]["containers"]
    named = [c for c in containers if c["name"] == "tensorflow"]
    return (named or containers)[0]["image"]
