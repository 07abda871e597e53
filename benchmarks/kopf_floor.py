"""kopf's own floor under the operator: the same TFJob events through an empty kopf handler,
through the leanest kopf operator that creates the same children, the same one applying them
(server-side apply, as the operator sends them), and through the operator.

On one control plane, one contender after the other, each in a namespace of its own and each
its own process (benchmarks/floor_operator.py run by `kopf run`, or `python -m tfjob_operator
--namespace ours`), with the controller-manager settled in between:

1. a burst of `--burst` TFJobs created at once: p50/p99 from each create to its handler's first
   call (the empty handler) or to its 4 children (the others);
2. `--jobs` more created at once: the time until all are handled, the process's CPU;
3. the process idle with all of them for IDLE_SECONDS: its RSS then (and at start, with none).

No kubelet runs: the pods the controller-manager makes stay Pending, for all alike.
Run: `python benchmarks/kopf_floor.py` (about 15 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes
from create_jobs import create_all, create_at_once, pct, rss_mb
from scale_measure import Audit, Sample, cpu_seconds, settle
from scale_run import audited_plane

from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.core.procs import free_port
from tfjob_testbed.project.operator import OperatorProcess

HERE = Path(__file__).resolve().parent
QUIET_CPU = 0.05  # CPU seconds over QUIET_WINDOW: the process is idle
QUIET_WINDOW = 2.0
IDLE_SECONDS = 30.0  # idle this long before its RSS is read


class KopfFloor:
    """`kopf run benchmarks/floor_operator.py` in one namespace, in `mode`."""

    def __init__(self, kubeconfig: Path, work: Path, mode: str, namespace: str) -> None:
        self.handled = work / f"floor-{mode}.handled"
        self.log = work / f"floor-{mode}.log"
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "FLOOR_MODE": mode,
            "FLOOR_LOG": str(self.handled),
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        }
        self.namespace = namespace
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> int:
        self.handled.touch()
        url = f"http://127.0.0.1:{free_port()}/healthz"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "kopf", "run", "--quiet", "--standalone", "--namespace",
                 self.namespace, "--liveness", url, str(HERE / "floor_operator.py")],
                env=self.env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        proc = self.proc

        def up() -> bool:
            assert proc.poll() is None, self.log.read_text()[-3000:]
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        wait_for(up, 60, "kopf's liveness endpoint")
        return proc.pid

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(60)

    def handled_at(self) -> dict[str, float]:
        lines = self.handled.read_text().splitlines()
        return {name: float(at) for name, at in (line.split() for line in lines if " " in line)}


def wait_idle(pid: int, timeout: float = 600) -> None:
    """Until the process spends under QUIET_CPU in QUIET_WINDOW: done with what it was sent."""
    last = {"cpu": cpu_seconds(pid), "at": time.monotonic()}

    def idle() -> bool:
        now = time.monotonic()
        if now - last["at"] < QUIET_WINDOW:
            return False
        cpu = cpu_seconds(pid)
        quiet = cpu - last["cpu"] < QUIET_CPU
        last.update(cpu=cpu, at=now)
        return quiet

    wait_for(idle, timeout, "the process idle", interval=0.5)


def idle_rss(pid: int) -> tuple[float, float]:
    """(current, peak) RSS once the process has been idle for IDLE_SECONDS: what it holds,
    not what a burst left in its allocator for a moment."""
    wait_idle(pid)
    time.sleep(IDLE_SECONDS)  # the measured idle window itself
    return rss_mb(pid)


def run_empty(api: Any, floor: KopfFloor, burst: int, jobs: int) -> dict[str, Any]:
    custom = kubernetes.client.CustomObjectsApi(api)
    pid = floor.start()
    start = Sample(pid).end()
    names = [f"b-{i:04d}" for i in range(burst)]
    created = create_all(custom, floor.namespace, names)
    wait_for(lambda: len(floor.handled_at()) >= burst, 600, "the burst handled", interval=0.05)
    handled = floor.handled_at()
    latencies = [handled[n] - created[n] for n in names]
    wait_idle(pid)
    sample, begin = Sample(pid), time.monotonic()
    create_all(custom, floor.namespace, [f"job-{i:04d}" for i in range(jobs)])
    total = burst + jobs
    wait_for(lambda: len(floor.handled_at()) >= total, 1800, "every job handled", interval=0.1)
    phase = sample.end()
    took = max(floor.handled_at().values()) - begin
    idle = idle_rss(pid)
    floor.stop()
    return _result(start, latencies, took, phase, idle)


def run_with_children(
    api: Any, start_fn: Callable[[], int], stop_fn: Callable[[], None], ns: str, burst: int,
    jobs: int,
) -> dict[str, Any]:  # fmt: skip
    pid = start_fn()
    start = Sample(pid).end()
    _, b = create_at_once(api, ns, burst, "b", timeout=1800)
    wait_idle(pid)
    sample = Sample(pid)
    _, many = create_at_once(api, ns, jobs, "job", timeout=1800)
    phase = sample.end()
    idle = idle_rss(pid)
    stop_fn()
    return _result(start, b["latencies"], many["total"], phase, idle)


def _result(
    start: dict[str, float], latencies: list[float], took: float, phase: dict[str, float],
    idle: tuple[float, float],
) -> dict[str, Any]:  # fmt: skip
    return {
        "rss_start": start["rss"],
        "p50": pct(latencies, 50),
        "p99": pct(latencies, 99),
        "took": took,
        "cpu": phase["cpu"],
        "rss_idle": idle[0],
        "rss_peak": idle[1],
    }


def print_table(results: dict[str, dict[str, Any]], burst: int, jobs: int) -> None:
    rows = [
        ("RSS at start, no job (MiB)", "rss_start", "{:.0f}"),
        (f"{burst} at once: create -> handled, p50 (s)", "p50", "{:.2f}"),
        (f"{burst} at once: create -> handled, p99 (s)", "p99", "{:.2f}"),
        (f"{jobs} at once: until all handled (s)", "took", "{:.1f}"),
        (f"{jobs} at once: CPU (s)", "cpu", "{:.1f}"),
        (f"idle with {burst + jobs} jobs: RSS (MiB)", "rss_idle", "{:.0f}"),
        ("peak RSS (MiB)", "rss_peak", "{:.0f}"),
    ]
    heads = list(results)
    width = max(len(r[0]) for r in rows)
    print("\nThe same TFJob events through kopf alone, kopf + client, and the operator")
    print(" | ".join([" " * width, *heads]))
    print("-|-".join(["-" * width, *("-" * len(h) for h in heads)]))
    for label, key, fmt in rows:
        cells = [fmt.format(results[h][key]).rjust(len(h)) for h in heads]
        print(" | ".join([label.ljust(width), *cells]))
    print(
        "\nhandled: the empty handler's first call; the 4 children in place for the others "
        "(2 Services, 2 StatefulSets), created (POST) or server-side applied (PATCH)."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--burst", type=int, default=100)
    args = parser.parse_args()
    with audited_plane("tfjob-kopf-floor-") as (work, plane, kubectl, api):
        kcm = Audit(plane.audit_log, ("kube-controller-manager/",))
        for ns in ("floor-empty", "floor-children", "floor-apply", "ours"):
            kubectl("create", "namespace", ns)
        results: dict[str, dict[str, Any]] = {}
        floor = KopfFloor(plane.kubeconfig, work, "empty", "floor-empty")
        results["kopf, empty handler"] = run_empty(api, floor, args.burst, args.jobs)
        lean = KopfFloor(plane.kubeconfig, work, "children", "floor-children")
        results["kopf + client, children"] = run_with_children(
            api, lean.start, lean.stop, "floor-children", args.burst, args.jobs
        )
        settle(kcm)
        applying = KopfFloor(plane.kubeconfig, work, "apply", "floor-apply")
        results["kopf + client, applying"] = run_with_children(
            api, applying.start, applying.stop, "floor-apply", args.burst, args.jobs
        )
        settle(kcm)
        ours = OperatorProcess(
            plane.kubeconfig, work / "operator.log",
            ["--log-level=info", "--kube-api-qps=0", "--namespace=ours"],
        )  # fmt: skip

        def start_ours() -> int:
            ours.start()
            assert ours.proc is not None
            return ours.proc.pid

        results["tfjob-operator"] = run_with_children(
            api, start_ours, ours.stop, "ours", args.burst, args.jobs
        )
        print_table(results, args.burst, args.jobs)
        print(f"\nlogs: {work}")


if __name__ == "__main__":
    main()
