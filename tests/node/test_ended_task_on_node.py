"""A task that ended stays ended, on the real node with the chart's operator: Kubernetes 1.37
keeps container restart rules, so a TensorFlow container whose exit ended its task is never
started again, and the operator's finalizer keeps its StatefulSet from making the pod again
while the job would have it (`rules/lifecycle/ended.py`)."""

from __future__ import annotations

import pytest

from tests.node.cluster_reads import (
    POD_WAIT,
    claim_files,
    container,
    fast_job,
    follow,
    job_pods,
    leader,
    wait_ended,
)
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.operator_cluster import OperatorCluster

pytestmark = pytest.mark.node
FINALIZER = "tfjob.dev/task-ended"
# A user's program with a side effect: one line on the job's volume for each run of it.
RUN_ONCE = 'echo ran >> "$TFJOB_CHECKPOINT_DIR/runs-$(hostname)"; sleep "$0"'


def _gone(cluster: OperatorCluster, namespace: str, job: str) -> None:
    """Delete the TFJob: every pod of it goes, those the finalizer held too."""
    cluster.kubectl("delete", "tfjob", job, "-n", namespace, "--wait=false")
    wait_for(lambda: not job_pods(cluster, namespace, job), POD_WAIT, f"{job}'s pods gone")


def test_a_chief_that_succeeded_ran_once_and_is_held_under_clean_pod_policy_none(
    cluster: OperatorCluster, namespace: str
) -> None:
    """The trainer's worker 0 (the chief of a job without one) succeeds; its job keeps its pods
    (cleanPodPolicy None): its pod, which the StatefulSet controller deleted once it
    Succeeded, stays, held by the operator's finalizer, its container started once; deleting
    the job lets it go."""
    job = fast_job("ended", "mnist-sync")
    job["spec"].setdefault("runPolicy", {})["cleanPodPolicy"] = "None"
    name = job["metadata"]["name"]
    chief = leader(job)
    cluster.apply(job, namespace)
    log = follow(cluster, chief, namespace)
    wait_ended(cluster, name, namespace, log=log)

    def held() -> dict | None:
        pod = cluster.get("pods", chief, "-n", namespace)
        ended = pod["status"].get("phase") == "Succeeded"
        return pod if ended and pod["metadata"].get("deletionTimestamp") else None

    pod = wait_for(held, POD_WAIT, f"{chief} Succeeded and held")
    assert FINALIZER in pod["metadata"]["finalizers"], pod["metadata"]
    tf = container(pod)
    assert tf["restartCount"] == 0 and tf["state"]["terminated"]["exitCode"] == 0, tf
    spec = next(c for c in pod["spec"]["containers"] if c["name"] == "tensorflow")
    assert spec["restartPolicy"] == "OnFailure", spec  # the replica's OnFailure, as its own
    _gone(cluster, namespace, name)


def test_a_users_program_runs_once_whichever_task_ends_first(
    cluster: OperatorCluster, namespace: str
) -> None:
    """A user image's program, not the trainer: each task appends a line to the job's volume
    and exits 0, worker 1 long before the chief. Each ran once, the worker's pod held while
    the job ran on; the job Succeeded and, by its default cleanPodPolicy, every pod went."""
    job = fast_job("runs-once")
    name = job["metadata"]["name"]
    sleeps = {"Chief": "8", "Worker": "0"}
    replicas = job["spec"]["tfReplicaSpecs"]
    del replicas["PS"]
    replicas["Worker"]["replicas"] = 2
    for rt, rs in replicas.items():
        (c,) = rs["template"]["spec"]["containers"]
        c["command"], c["args"] = ["sh", "-c", RUN_ONCE], [sleeps[rt]]
    cluster.apply(job, namespace)
    wait_ended(cluster, name, namespace)
    wait_for(lambda: not job_pods(cluster, namespace, name), POD_WAIT, f"{name}'s pods gone")
    claim = f"{name}-checkpoints"
    runs = {p: size for p, (_, size) in claim_files(cluster, claim, namespace).items()
            if p.startswith("runs-")}  # fmt: skip
    ran_once = len("ran\n")
    want = {f"runs-{name}-chief-0", f"runs-{name}-worker-0", f"runs-{name}-worker-1"}
    assert runs == dict.fromkeys(want, ran_once), runs
    cluster.kubectl("delete", "tfjob", name, "-n", namespace, "--wait=false")
