"""Leader election: how long the operator goes without a leader when its leader stops.

Two operator processes with the chart's Lease timing (15 s lease, 10 s renew deadline, 2 s
retry) on a real control plane. The leader is stopped cleanly (SIGTERM, as a pod deletion or a
rolling update does: it releases the Lease) or crashes (SIGKILL: the Lease must run out), and
the time until the other replica holds the Lease is measured, from the signal. The stopped
replica then starts again as the standby. Prints a table.

Run: `python benchmarks/leader_handover.py --runs 3`.
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import time

import kubernetes

from tfjob_operator.controller.leader import Timing
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.core.paths import scratch_dir
from tfjob_testbed.project.operator import OperatorProcess
from tfjob_testbed.sandbox import stack

LEASE, NAMESPACE = "tfjob-operator-leader", "default"


def holder(coordination: kubernetes.client.CoordinationV1Api) -> str:
    try:
        spec = coordination.read_namespaced_lease(LEASE, NAMESPACE).spec
    except kubernetes.client.ApiException as e:
        if e.status == 404:
            return ""
        raise
    return spec.holder_identity or ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="handovers per way of stopping")
    args = p.parse_args(argv)
    timing = Timing()
    workdir = scratch_dir("tfjob-handover-")
    with stack(workdir) as s:
        s.operator.stop()  # the stack's own, without election
        coordination = kubernetes.client.CoordinationV1Api(s.api)
        flags = ["--leader-elect", f"--leader-elect-resource-namespace={NAMESPACE}"]
        procs = {}
        for name in ("op-a", "op-b"):
            procs[name] = OperatorProcess(s.plane.kubeconfig, workdir / f"{name}.log", flags)
            procs[name].env["POD_NAME"] = name
            procs[name].start()
        wait_for(lambda: holder(coordination), 30, "a leader")
        results: dict[str, list[float]] = {"SIGTERM (released)": [], "SIGKILL (runs out)": []}
        for _ in range(args.runs):
            for way, sig in (
                ("SIGTERM (released)", signal.SIGTERM),
                ("SIGKILL (runs out)", signal.SIGKILL),
            ):
                old = holder(coordination)
                leader = procs[old.rsplit("_", 1)[0]]
                time.sleep(timing.retry_period * 1.5)  # a renewal in between, as in real life
                stopped = time.monotonic()
                leader.proc.send_signal(sig)
                wait_for(
                    lambda old=old: (h := holder(coordination)) and h != old,
                    timing.lease_duration + 10,
                    "a new leader",
                    interval=0.05,
                )
                results[way].append(time.monotonic() - stopped)
                leader.proc.wait(30)
                leader.start()  # back as the standby
        for proc in procs.values():
            proc.stop()
    print(
        f"\nLeader handover, two operator replicas, lease {timing.lease_duration:g} s, "
        f"renew deadline {timing.renew_deadline:g} s, retry {timing.retry_period:g} s\n"
    )
    print("| leader stopped by | runs | min | median | max |")
    print("|---|---|---|---|---|")
    for way, times in results.items():
        print(
            f"| {way} | {len(times)} | {min(times):.2f} s | {statistics.median(times):.2f} s "
            f"| {max(times):.2f} s |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
