"""Create N TFJobs at once on a real control plane and time how fast their children appear.

Prints a table: p50/p99/max latency from a TFJob's create to all of its children existing, the
operator's RSS, and the same children created by a bare client loop on the same API server
(the floor), with the ratio. Run: `make bench` or `python benchmarks/create_jobs.py --jobs 100`.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes

from tfjob_operator.api.spec import GROUP, PLURAL, VERSION, parse_spec
from tfjob_operator.rules.children import JobRef, desired_children
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import Kubectl, wait_for
from tfjob_testbed.core.paths import scratch_dir
from tfjob_testbed.project.operator import OperatorProcess
from tfjob_testbed.sandbox import stack

REPLICAS = {"PS": 1, "Worker": 2}
CHILDREN_PER_JOB = 4  # 2 Services + 2 StatefulSets


class ChildWatch:
    """Records when each job's children first appear, from a watch on the API server."""

    def __init__(self, api: kubernetes.client.ApiClient, namespace: str) -> None:
        self.seen: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        core, apps = kubernetes.client.CoreV1Api(api), kubernetes.client.AppsV1Api(api)
        self._threads = [
            threading.Thread(target=self._run, args=(fn, namespace), daemon=True)
            for fn in (core.list_namespaced_service, apps.list_namespaced_stateful_set)
        ]
        for t in self._threads:
            t.start()

    def _run(self, list_fn, namespace: str) -> None:
        try:
            self._watch(list_fn, namespace)
        except Exception:
            if not self._stop.is_set():
                raise

    def _watch(self, list_fn, namespace: str) -> None:
        w = kubernetes.watch.Watch()
        for ev in w.stream(list_fn, namespace, timeout_seconds=600):
            if self._stop.is_set():
                w.stop()
                return
            obj = ev["object"]
            job = (obj.metadata.labels or {}).get("tfjob.dev/job-name")
            if ev["type"] == "ADDED" and job:
                with self._lock:
                    key = f"{obj.kind}/{obj.metadata.name}"
                    self.seen.setdefault(job, {}).setdefault(key, time.monotonic())

    def complete(self, jobs: list[str]) -> bool:
        with self._lock:
            return all(len(self.seen.get(j, {})) >= CHILDREN_PER_JOB for j in jobs)

    def done_at(self, job: str) -> float:
        return max(self.seen[job].values())

    def stop(self) -> None:
        self._stop.set()


def rss_mb(pid: int) -> tuple[float, float]:
    """(current, peak) resident memory of a process, in MiB."""
    fields = dict(
        line.split(":", 1)
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if ":" in line
    )
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def create_all(
    custom: kubernetes.client.CustomObjectsApi, ns: str, names: list[str]
) -> dict[str, float]:
    """The TFJobs of `names` from 8 client threads at once; when each create returned."""
    created: dict[str, float] = {}

    def create(name: str) -> None:
        body = tfjob(name=name, namespace=ns, replicas=REPLICAS)
        body["metadata"].pop("uid")
        custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
        created[name] = time.monotonic()

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, names))
    return created


def create_at_once(
    api: kubernetes.client.ApiClient, ns: str, n: int, prefix: str = "job", timeout: float = 600
) -> tuple[list[str], dict[str, Any]]:
    """n TFJobs from 8 client threads at once; when each job's children appeared."""
    watch = ChildWatch(api, ns)
    names = [f"{prefix}-{i:04d}" for i in range(n)]
    start = time.monotonic()
    created = create_all(kubernetes.client.CustomObjectsApi(api), ns, names)
    wait_for(lambda: watch.complete(names), timeout, f"children of {n} jobs", interval=0.05)
    watch.stop()
    latencies = [watch.done_at(j) - created[j] for j in names]
    total = max(watch.done_at(j) for j in names) - start
    return names, {"latencies": latencies, "total": total}


def run_operator(api, kubectl: Kubectl, operator: OperatorProcess, n: int, ns: str) -> dict:
    kubectl("create", "namespace", ns)
    return create_at_once(api, ns, n)[1]


def run_bare(api, kubectl: Kubectl, n: int, ns: str) -> dict:
    """The floor: a plain client loop creating the same children, one job after another."""
    core, apps = kubernetes.client.CoreV1Api(api), kubernetes.client.AppsV1Api(api)
    kubectl("create", "namespace", ns)
    spec = parse_spec(tfjob(replicas=REPLICAS)["spec"])
    latencies, since_start = [], []
    start = time.monotonic()
    for i in range(n):
        t0 = time.monotonic()
        ref = JobRef(f"job-{i:03d}", ns, "00000000-0000-0000-0000-000000000000")
        for obj in desired_children(ref, spec, "cluster.local"):
            obj["metadata"].pop("ownerReferences")
            if obj["kind"] == "Service":
                core.create_namespaced_service(ns, obj)
            else:
                apps.create_namespaced_stateful_set(ns, obj)
        latencies.append(time.monotonic() - t0)
        since_start.append(time.monotonic() - start)
    return {"latencies": latencies, "since_start": since_start, "total": time.monotonic() - start}


def add_qps_argument(parser: argparse.ArgumentParser) -> None:
    """--kube-api-qps for the operator under test, off by default."""
    parser.add_argument(
        "--kube-api-qps",
        default="0",
        help="the operator's client-side rate limit; the default 0 (none) measures the operator "
        "itself, where the operator's own default (20) would measure the limit",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    add_qps_argument(parser)
    args = parser.parse_args()
    work = scratch_dir("tfjob-bench-")
    operator_args = ["--log-level=info", f"--kube-api-qps={args.kube_api_qps}"]
    with stack(work, operator_args) as s:
        idle_rss, _ = rss_mb(s.operator.proc.pid)
        op = run_operator(s.api, s.kubectl, s.operator, args.jobs, "bench-operator")
        rss, peak = rss_mb(s.operator.proc.pid)
        s.operator.stop()
        bare = run_bare(s.api, s.kubectl, args.jobs, "bench-bare")

    n = args.jobs
    rows = [
        ("operator: create -> children p50", f"{statistics.median(op['latencies']):.3f} s"),
        ("operator: create -> children p99", f"{pct(op['latencies'], 99):.3f} s"),
        ("operator: create -> children max", f"{max(op['latencies']):.3f} s"),
        (f"operator: all {n} jobs' children", f"{op['total']:.2f} s"),
        (
            "bare loop: burst start -> children p50",
            f"{statistics.median(bare['since_start']):.3f} s",
        ),
        ("bare loop: burst start -> children p99", f"{pct(bare['since_start'], 99):.3f} s"),
        ("bare loop: one job's children p50", f"{statistics.median(bare['latencies']):.3f} s"),
        (f"bare loop: all {n} jobs' children", f"{bare['total']:.2f} s"),
        ("ratio operator / bare (all jobs)", f"{op['total'] / bare['total']:.2f}x"),
        ("operator RSS idle / after / peak", f"{idle_rss:.0f} / {rss:.0f} / {peak:.0f} MiB"),
    ]
    width = max(len(k) for k, _ in rows)
    print(
        f"\n{n} TFJobs (PS=1, Worker=2: {n * CHILDREN_PER_JOB} children), created at once "
        f"(operator --kube-api-qps={args.kube_api_qps})"
    )
    print(f"{'measure'.ljust(width)} | value")
    print(f"{'-' * width}-|-{'-' * 22}")
    for k, v in rows:
        print(f"{k.ljust(width)} | {v}")


if __name__ == "__main__":
    main()
