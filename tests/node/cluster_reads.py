"""What the end-to-end and chaos tests read from a cluster, through kubectl as a user would:
job states, pod logs, the files on a job's claim, its children by uid."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from tfjob_testbed.core.jobs import example
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.operator_cluster import CHART, NAMESPACE, RELEASE, OperatorCluster

LEASE = "tfjob-operator-leader"  # the chart's: <release fullname>-leader
LEASE_DURATION = 15.0  # the chart's default
TRAIN_WAIT = 600  # a few hundred steps on 2 shared cores, plus TensorFlow's start-up
POD_WAIT = 180
# Small and quick, as docs/install.md's override suggests: digits data, few steps, frequent
# checkpoints.
CHECKPOINT_EVERY = 50
FAST = ["--dataset=digits", "--steps=300", "--batch-size=32", "--log-every=25"]
FAST += [f"--checkpoint-every={CHECKPOINT_EVERY}"]
STEP = re.compile(r"^step (\d+)\b", re.MULTILINE)
SAVED = re.compile(r"saved \S*ckpt-(\d+) at step (\d+)")
RESTORED = re.compile(r"restored \S*ckpt-(\d+) at step (\d+)")
# A stop on request: the trainer saved at the step it was on (runtime/stopping.py).
STOPPED = re.compile(r"stopped at step (\d+), saved \S*ckpt-(\d+)")


def fast_job(name: str, file: str = "mnist-ps", *more: str) -> dict[str, Any]:
    """A shipped example, renamed, with small data and step counts."""
    return example(file, name, [*FAST, *more])


def leader(job: dict[str, Any]) -> str:
    """The pod that logs progress and decides success: the chief, else worker 0."""
    name, specs = job["metadata"]["name"], job["spec"]["tfReplicaSpecs"]
    return f"{name}-chief-0" if "Chief" in specs else f"{name}-worker-0"


def conditions(status: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in status.get("conditions") or []]


def is_true(status: dict[str, Any], kind: str) -> bool:
    return (kind, "True") in conditions(status)


def wait_ended(
    cluster: OperatorCluster,
    name: str,
    namespace: str,
    want: str = "Succeeded",
    timeout: float = TRAIN_WAIT,
    log: FollowedLog | None = None,
) -> dict[str, Any]:
    """Wait for the job to end; fail at once, with its status (and the end of `log`, the
    chief's, say), if it ends the other way."""
    other = "Failed" if want == "Succeeded" else "Succeeded"

    def ended() -> dict[str, Any] | None:
        status = cluster.tfjob_status(name, namespace)
        if is_true(status, other):
            tail = f"\nlog:\n{log.text[-3000:]}" if log is not None else ""
            raise AssertionError(f"{name} ended {other}, not {want}: {json.dumps(status)}{tail}")
        return status if is_true(status, want) else None

    return wait_for(ended, timeout, f"{name} {want}", interval=0.5)


def established(cluster: OperatorCluster, crd: str) -> bool:
    """Whether the CRD is Established (not `kubectl wait`: it fails on a CRD whose status has
    no conditions yet, as it has done under load; see `Kubectl.wait_established`)."""
    conditions = (cluster.get("crd", crd).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def pod(cluster: OperatorCluster, name: str, namespace: str) -> dict[str, Any]:
    return cluster.get("pod", name, "-n", namespace)


def container(pod_: dict[str, Any], name: str = "tensorflow") -> dict[str, Any]:
    """The status of a pod's container (the TensorFlow one by default; {} before it has one)."""
    statuses = (pod_.get("status") or {}).get("containerStatuses") or []
    return next((c for c in statuses if c["name"] == name), {})


def newest_step(log: str) -> int:
    steps = STEP.findall(log)
    return int(steps[-1]) if steps else 0


def wait_step(cluster: OperatorCluster, pod_: str, namespace: str, step: int) -> str:
    """Wait for the pod's current run to log a step at or past `step`; return its log."""

    def reached() -> str | None:
        log = cluster.logs(pod_, namespace)
        return log if newest_step(log) >= step else None

    return wait_for(reached, TRAIN_WAIT, f"{pod_} to log step {step}", interval=0.3)


def children(cluster: OperatorCluster, job: str, namespace: str) -> dict[tuple[str, str], str]:
    """Every child of the job by (kind, name), with its uid: a re-created child shows."""
    found = {}
    for kind in ("statefulsets", "services", "persistentvolumeclaims"):
        items = cluster.get(kind, "-n", namespace, "-l", f"tfjob.dev/job-name={job}")["items"]
        for obj in items:
            found[(obj["kind"], obj["metadata"]["name"])] = obj["metadata"]["uid"]
    return found


def job_pods(cluster: OperatorCluster, namespace: str, job: str) -> list[dict[str, Any]]:
    """The pods of a `tfjob.dev` job, by its label."""
    return cluster.get("pods", "-n", namespace, "-l", f"tfjob.dev/job-name={job}")["items"]


def assert_scaled_down(cluster: OperatorCluster, job: str, namespace: str) -> None:
    def down() -> bool:
        sets = cluster.get("statefulsets", "-n", namespace, "-l", f"tfjob.dev/job-name={job}")
        return bool(sets["items"]) and all(s["spec"]["replicas"] == 0 for s in sets["items"])

    wait_for(down, 60, f"{job}'s StatefulSets scaled to 0")


LIST_FILES = """
import os, sys
for top, _, files in os.walk(sys.argv[1]):
    for f in files:
        p = os.path.join(top, f)
        st = os.stat(p)
        print(st.st_uid, st.st_size, os.path.relpath(p, sys.argv[1]))
"""


def claim_files(cluster: OperatorCluster, claim: str, namespace: str) -> dict[str, tuple[int, int]]:
    """relative path -> (uid, size) of every file on a claim, read by a pod that mounts it
    read-only (the trainer image's python), as a user would look on any cluster."""
    reader = f"read-{claim}"[:63]
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": reader},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "ls",
                        "image": "tfjob-operator/trainer:0.1.0",
                        "command": ["python", "-c", LIST_FILES, "/data"],
                        "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
                    }
                ],
                "volumes": [
                    {
                        "name": "data",
                        "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
                    }
                ],
            },
        },
        namespace,
    )
    wait_for(
        lambda: pod(cluster, reader, namespace).get("status", {}).get("phase") == "Succeeded",
        POD_WAIT,
        f"the pod that lists {claim}",
    )
    out = cluster.logs(reader, namespace)
    cluster.kubectl("delete", "pod", reader, "-n", namespace, "--wait=false")
    files = {}
    for line in out.splitlines():
        uid, size, path = line.split(" ", 2)
        files[path] = (int(uid), int(size))
    return files


class FollowedLog:
    """`kubectl logs -f` of one container run, kept after its pod is gone (a finished job's
    pods go at the scale-down that follows success)."""

    def __init__(
        self, cluster: OperatorCluster, pod_: str, namespace: str, container_: str | None = None
    ) -> None:
        which = ["-c", container_] if container_ else []
        self.proc = subprocess.Popen(
            [str(cluster.tools.kubectl), "--kubeconfig", str(cluster.kubeconfig), "logs", "-f",
             "-n", namespace, pod_, *which],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._collect, daemon=True)
        self._reader.start()

    def _collect(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def wait(self, timeout: float = TRAIN_WAIT) -> str:
        """The whole log, once the container has ended."""
        self.proc.wait(timeout)
        self._reader.join(timeout)  # its last lines, read up to the end of the stream
        return self.text

    def until(self, check: Callable[[str], Any], what: str, timeout: float = TRAIN_WAIT) -> Any:
        """Wait until `check` holds of the log so far; fail at once, with the log's end, if
        this run of the container ends first (a restart in place is another run)."""

        def holds() -> Any:
            if found := check(self.text):
                return found
            if not self._reader.is_alive():  # the stream ended: every line of the run is read
                if found := check(self.text):
                    return found
                end = self.text[-3000:]
                raise AssertionError(f"{what}: the container's run ended first\n{end}")
            return None

        return wait_for(holds, timeout, what)


def follow(cluster: OperatorCluster, pod_: str, namespace: str, restarts: int = 0) -> FollowedLog:
    """Follow the pod's container from its start, once its run number `restarts` runs."""

    def runs() -> bool:
        c = container(pod(cluster, pod_, namespace))
        return c.get("restartCount", -1) >= restarts and "running" in c.get("state", {})

    wait_for(runs, POD_WAIT, f"{pod_} running (after {restarts} restarts)")
    return FollowedLog(cluster, pod_, namespace)


def wait_halfway_past_a_checkpoint(log: FollowedLog) -> None:
    """Until the chief is halfway between two checkpoints: a fault then loses what was trained
    since the last one."""
    wait_for(
        lambda: (
            (saved := SAVED.findall(log.text))
            and newest_step(log.text) >= int(saved[-1][1]) + CHECKPOINT_EVERY // 2
        ),
        TRAIN_WAIT,
        "the chief halfway past a checkpoint",
    )


def has_exited(cluster: OperatorCluster, pod_: str, namespace: str) -> bool:
    """Whether the pod's tensorflow container has ended at least once."""
    c = container(pod(cluster, pod_, namespace))
    return "terminated" in c.get("state", {}) or "terminated" in c.get("lastState", {})


def helm_operator(cluster: OperatorCluster, *sets: str) -> None:
    """The operator's release as it is, with `sets`; returns once the new operator pods have
    replaced the old ones."""
    args = [a for s in sets for a in ("--set", s)]
    cluster.helm(
        "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values", *args,
        "--wait", "--timeout", "5m",
    )  # fmt: skip
    cluster.kubectl("rollout", "status", "deployment", "--namespace", NAMESPACE, "--timeout=300s")


def operator_pods(cluster: OperatorCluster) -> list[str]:
    """The names of the operator's pods that are not going away: neither being deleted nor
    ended (a pod the kubelet evicted, under disk pressure say, stays as Succeeded or Failed
    while its ReplicaSet runs a new one)."""
    pods = cluster.get("pods", "-n", NAMESPACE)["items"]
    return [
        p["metadata"]["name"]
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
    ]


def lease(cluster: OperatorCluster) -> dict:
    return cluster.get("lease", LEASE, "-n", NAMESPACE).get("spec") or {}


def lease_holder(cluster: OperatorCluster) -> str:
    """The identity in the Lease: `<pod>_<random>`, a new one for each process."""
    return lease(cluster).get("holderIdentity") or ""


def holder_pod(identity: str) -> str:
    return identity.rsplit("_", 1)[0]
