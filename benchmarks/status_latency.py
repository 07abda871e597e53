"""How soon a TFJob's status tells what its pods did, on the real node: a chief's exit 0 →
`Succeeded`, and a worker's retryable crash → `Restarting`.

Each container is the trainer image's Python with a one-line program that writes its own exit
time (the host's clock, in ns) to its termination message just before it exits. Watches on pods
and TFJobs stamp when the exit became visible in the pod's status (the kubelet's report) and when
the condition appeared (the operator's part). Jobs run one after another, so no job waits
behind another.

The cluster is what `make cluster` starts (tfjob_testbed.operator_cluster). Needs root.
Run: `python benchmarks/status_latency.py --jobs 20`.
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any

from nodewatch import Marks, Watcher, print_table

from tfjob_testbed.operator_cluster import OperatorCluster, running

IMAGE = "tfjob-operator/trainer:0.1.0"
DEADLINE = 120
# The exit time goes to the termination message, which the kubelet puts in the pod's status.
WRITE_EXIT = "open('/dev/termination-log', 'w').write(str(time.time_ns()))"
# Exits 0 at once.
SUCCEED = f"import time; {WRITE_EXIT}"
# First run: exit 200 (a lost peer: retried under ExitCode). Its restart (a marker on an
# emptyDir, which outlives the container) waits 3 s, so that the job is still running when
# the crash is reported, then exits 0 and the job succeeds.
CRASH_ONCE = (
    "import os, sys, time\n"
    "first = not os.path.exists('/scratch/crashed')\n"
    "open('/scratch/crashed', 'w').close()\n"
    "first or time.sleep(3)\n"
    f"{WRITE_EXIT}\n"
    "sys.exit(200 if first else 0)\n"
)


def job(name: str, replica: str, program: str, policy: str) -> dict[str, Any]:
    """One replica, the tfjob-operator trainer image running `program`."""
    container: dict[str, Any] = {
        "name": "tensorflow",
        "image": IMAGE,
        "command": ["python", "-c", program],
        "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
    }
    return {
        "apiVersion": "tfjob.dev/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "runPolicy": {"backoffLimit": 3},
            "tfReplicaSpecs": {
                replica: {
                    "replicas": 1,
                    "restartPolicy": policy,
                    "template": {
                        "spec": {
                            "containers": [container],
                            "volumes": [{"name": "scratch", "emptyDir": {}}],
                        }
                    },
                }
            },
        },
    }


def exit_seen(marks: Marks, pod: str, code: int) -> tuple[float, float]:
    """(the container's own exit time, when its status first showed that exit)."""

    def found() -> tuple[float, float] | None:
        for key in marks.all():
            if key[:2] == ("terminated", pod):
                at, (exit_code, message) = marks.get(key)
                if exit_code == code and message.strip().isdigit():
                    return int(message) / 1e9, at
        return None

    return marks.wait_for(found, DEADLINE, f"{pod} exit {code}")


def one_job(
    cluster: OperatorCluster, marks: Marks, ns: str, kind: str, index: int
) -> dict[str, float | None]:
    """Apply one job, wait for its end; the moments of its exit, report and condition."""
    name = f"{kind}-{index}"
    if kind == "succeed":
        body, pod, code, condition = (
            job(name, "Chief", SUCCEED, "Never"),
            f"{name}-chief-0",
            0,
            "Succeeded",
        )
    else:
        body, pod, code = job(name, "Worker", CRASH_ONCE, "ExitCode"), f"{name}-worker-0", 200
        condition = "Restarting"
    cluster.apply(body, ns)
    exited, reported = exit_seen(marks, pod, code)
    marks.wait(("condition", name, "Succeeded"), DEADLINE)
    out: dict[str, float | None] = {"kubelet": reported - exited}
    shown = marks.get(("condition", name, condition))
    out["condition"] = None if shown is None else shown[0] - exited
    if kind == "crash":
        counted = marks.get(("restart counted", name))
        out["counted"] = None if counted is None else counted[0] - exited
    cluster.kubectl("delete", "tfjob", name, "-n", ns, "--wait=false")
    return out


def rows(results: list[dict[str, float | None]], what: str) -> list[tuple[str, list[float]]]:
    def column(key: str) -> list[float]:
        return [r[key] for r in results if r.get(key) is not None]

    kubelet, condition = column("kubelet"), column("condition")
    operator = [r["condition"] - r["kubelet"] for r in results if r.get("condition") is not None]
    out = [
        ("exit → exit visible in the pod's status (kubelet)", kubelet),
        (f"exit visible → {what} visible (operator)", operator),
        (f"exit → {what} visible (total)", condition),
    ]
    if any("counted" in r for r in results):
        out.append(("exit → restart counted in status.restarts", column("counted")))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20, help="jobs of each kind")
    a = parser.parse_args()
    with running() as cluster:
        bring_up = cluster.timings["total"]
        ns = f"latency-{uuid.uuid4().hex[:6]}"
        cluster.kubectl("create", "namespace", ns)
        marks = Marks()
        results: dict[str, list[dict[str, float | None]]] = {"succeed": [], "crash": []}
        with Watcher(cluster.kubeconfig, ns, marks):
            for i in range(a.jobs):
                for kind, done in results.items():
                    done.append(one_job(cluster, marks, ns, kind, i))
                    print(f"{kind} {i}: {done[-1]}", flush=True)
    print(f"\n(cluster up in {bring_up:.0f} s)")
    succeeded = results["succeed"]
    print_table(
        f"Chief exits 0 → TFJob Succeeded, {len(succeeded)} jobs one after another:",
        rows(succeeded, "Succeeded"),
    )
    crashed = results["crash"]
    missed = sum(1 for r in crashed if r.get("condition") is None)
    print_table(
        f"Worker exits 200 under restartPolicy ExitCode → TFJob Restarting, {len(crashed)} jobs "
        f"one after another (Restarting never shown in {missed}):",
        rows(crashed, "Restarting"),
    )


if __name__ == "__main__":
    main()
