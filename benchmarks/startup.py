"""Where the time from `kubectl apply` to the first training step goes, on the real node.

mnist-ps as shipped (a chief, a parameter server, two workers) with `--log-every=10`, so that
the chief's first report is its first closure of 10 steps. Each part comes from whoever sees it
first-hand, all on the host's wall clock:

- the API, through watches: each pod's creation, its binding to the node, its container
  reported running;
- the trainer, in its `start-up:` lines: when its process started, and how long it then spent
  importing TensorFlow, preparing the data, waiting for its peers' DNS records, and until its
  first step.

The cluster is what `make cluster` starts (tfjob_testbed.operator_cluster). Needs root.
Run: `python benchmarks/startup.py --runs 5`.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass

import yaml
from nodewatch import GROUP, Marks, Watcher, print_table

from tfjob_testbed.core.jobs import example
from tfjob_testbed.operator_cluster import OperatorCluster, running

JOB = "mnist-ps"
PODS = [f"{JOB}-chief-0", f"{JOB}-ps-0", f"{JOB}-worker-0", f"{JOB}-worker-1"]
CHIEF = PODS[0]
DEADLINE = 600
READY = re.compile(
    r"start-up: (?P<parts>.*); ready (?P<ready>[\d.]+) s after process start \((?P<at>[\d.]+)\)"
)
FIRST_STEP = re.compile(r"start-up: first step (?P<first>[\d.]+) s after process start")


class Logs:
    """`kubectl logs -f` of each pod, from when its container is reported running."""

    def __init__(self, cluster: OperatorCluster, namespace: str) -> None:
        self.cluster, self.namespace = cluster, namespace
        self.text: dict[str, list[str]] = {}
        self._procs: list[subprocess.Popen[str]] = []

    def follow(self, pod: str) -> None:
        lines = self.text.setdefault(pod, [])
        proc = subprocess.Popen(
            [str(self.cluster.tools.kubectl), "--kubeconfig", str(self.cluster.kubeconfig),
             "logs", "-f", "-n", self.namespace, pod],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        self._procs.append(proc)

        def read() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)

        threading.Thread(target=read, daemon=True).start()

    def find(self, pod: str, pattern: re.Pattern[str]) -> re.Match[str] | None:
        for line in list(self.text.get(pod, [])):
            if match := pattern.search(line):
                return match
        return None

    def stop(self) -> None:
        for proc in self._procs:
            proc.terminate()
            proc.wait()


def wait(check, what: str) -> object:
    """Poll `check` until it returns something; the logs have no event to wait on."""
    deadline = time.monotonic() + DEADLINE
    while not (value := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not within {DEADLINE} s")
        time.sleep(0.1)
    return value


@dataclass
class Started:
    """What one job's start-up showed: the moment of `kubectl apply` (t0), the watches' marks,
    and each pod's `start-up:` parts (seconds; `started` is the process's start, wall clock)."""

    t0: float
    marks: Marks
    tasks: dict[str, dict[str, float]]
    first_step_at: float

    def last_started(self) -> float:
        """Seconds from apply until the last of the trainer processes started."""
        return max(t["started"] for t in self.tasks.values()) - self.t0

    def last_ready(self) -> float:
        """Seconds from apply until the last task was ready (its peers' records found)."""
        return max(t["started"] + t["ready"] for t in self.tasks.values()) - self.t0


def start_one(
    cluster: OperatorCluster, ns: str, job: dict, pods: list[str], group: str = GROUP
) -> Started:
    """Apply `job` in `ns` and follow it to Succeeded: its start-up as the watches and the
    trainer's own lines saw it. The first of `pods` is the chief."""
    marks = Marks()
    logs = Logs(cluster, ns)
    with Watcher(cluster.kubeconfig, ns, marks, group):
        t0 = time.time()
        cluster.kubectl("apply", "-n", ns, "-f", "-", input=yaml.safe_dump(job))
        marks.mark("applied", time.time())
        for pod in pods:
            marks.wait(("running", pod), DEADLINE)
            logs.follow(pod)
        first = wait(lambda: logs.find(pods[0], FIRST_STEP), "the chief's first step line")
        ready = {
            pod: wait(lambda p=pod: logs.find(p, READY), f"{pod}'s start-up line") for pod in pods
        }
        marks.wait(("condition", job["metadata"]["name"], "Succeeded"), DEADLINE)
    logs.stop()

    def parts(match: re.Match[str]) -> dict[str, float]:
        found = dict(re.findall(r"(\w+) ([\d.]+) s", match["parts"]))
        return {name: float(v) for name, v in found.items()} | {
            "ready": float(match["ready"]),
            "started": float(match["at"]),
        }

    tasks = {pod: parts(match) for pod, match in ready.items()}
    return Started(t0, marks, tasks, tasks[pods[0]]["started"] + float(first["first"]))


def one_run(
    cluster: OperatorCluster, extra: list[str], storage_class: str | None
) -> dict[str, float]:
    """Apply mnist-ps in a fresh namespace (its checkpoint claim of `storage_class`, None: the
    default class); each part of its start-up, in seconds."""
    ns = f"startup-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    job = example(JOB, JOB, extra)
    if storage_class:
        job["spec"]["checkpoint"]["storage"]["storageClassName"] = storage_class
    run = start_one(cluster, ns, job, PODS)
    cluster.kubectl("delete", "namespace", ns, "--timeout=300s")
    t0, marks, every = run.t0, run.marks, run.tasks
    chief = every[CHIEF]
    created, scheduled = marks.get(("created", CHIEF))[0], marks.get(("scheduled", CHIEF))[0]
    return {
        "applied": marks.get("applied")[0] - t0,
        "created": created - t0,
        "scheduled": scheduled - created,
        "container": chief["started"] - scheduled,
        "peers": chief.get("peers", 0.0),
        "data": chief.get("data", 0.0),
        "import": chief.get("import", 0.0),
        "other": chief["ready"]
        - chief.get("peers", 0.0)
        - chief.get("data", 0.0)
        - chief.get("import", 0.0),
        "first_step": run.first_step_at - chief["started"] - chief["ready"],
        "total": run.first_step_at - t0,
        "reported": marks.get(("running", CHIEF))[0] - chief["started"],
        "last_started": run.last_started(),
        "max_import": max(p.get("import", 0.0) for p in every.values()),
        "max_data": max(p.get("data", 0.0) for p in every.values()),
        "last_ready": run.last_ready(),
    }


ROWS = [
    ("applied", "`kubectl apply` returned"),
    ("created", "apply → chief pod created (operator, StatefulSet controller)"),
    ("scheduled", "pod created → bound to the node (scheduler, volume binding)"),
    ("container", "bound → trainer process started (sandbox, network, container, Python)"),
    ("peers", "trainer: waiting for peers' DNS records"),
    ("data", "trainer: data (read MNIST, write record files)"),
    ("import", "trainer: TensorFlow import (the strategy's module)"),
    ("other", "trainer: the rest before ready (flags, TF_CONFIG, logging)"),
    ("first_step", "ready → first report (10 steps: connect, build, trace, run)"),
    ("total", "apply → chief's first report (total)"),
    ("reported", "aside: process started → running visible in the API (kubelet report)"),
    ("last_started", "aside: apply → the last of 4 processes started"),
    ("max_import", "aside: slowest TensorFlow import of the 4"),
    ("max_data", "aside: slowest data of the 4"),
    ("last_ready", "aside: apply → the last of 4 tasks ready"),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100, help="the example's --steps")
    parser.add_argument(
        "--storage-class",
        help="the checkpoint claim's class (default: the cluster's default, which on the bed "
        "binds at the first consumer as kind's does; `shared` binds at once)",
    )
    a = parser.parse_args()
    extra = [f"--steps={a.steps}", "--log-every=10"]
    with running() as cluster:
        bring_up = cluster.timings["total"]
        runs = []
        for i in range(a.runs):
            runs.append(one_run(cluster, extra, a.storage_class))
            print(f"run {i + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in runs[-1].items()))
    print(f"\n(cluster up in {bring_up:.0f} s)")
    print_table(
        f"mnist-ps (--steps={a.steps}, --log-every=10, checkpoint claim of class "
        f"{a.storage_class or 'default'}) on the real node, {len(runs)} runs one after another, "
        "the chief's start-up part by part:",
        [(label, [r[key] for r in runs]) for key, label in ROWS],
    )


if __name__ == "__main__":
    main()
