"""What one poll of a node test's wait costs: a `kubectl get -o json` process (as the waits did)
against the same read through the bed's API client (tfjob_testbed.core.reads), on a real
control plane. Prints a table: wall time and CPU seconds (this process and its children) per
read, for a TFJob by name and for a label-selected list of pods.
Run: `python benchmarks/bed_reads.py --reads 200`.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable

from tfjob_testbed.controlplane.binaries import ensure_binaries
from tfjob_testbed.controlplane.plane import ControlPlane
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import Kubectl
from tfjob_testbed.core.paths import scratch_dir
from tfjob_testbed.core.reads import Reads
from tfjob_testbed.core.tools import ensure_tools
from tfjob_testbed.sandbox import install_crd


def cpu() -> float:
    """CPU seconds of this process and of its children that have ended."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def measure(read: Callable[[], object], n: int) -> tuple[float, float]:
    """Per read: (wall seconds, CPU seconds)."""
    read()  # warm: discovery, connections
    wall, used = time.monotonic(), cpu()
    for _ in range(n):
        read()
    return (time.monotonic() - wall) / n, (cpu() - used) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reads", type=int, default=200)
    args = parser.parse_args()
    with ControlPlane(scratch_dir("bed-reads"), ensure_binaries()) as plane:
        kubectl = Kubectl(ensure_tools().kubectl, plane.kubeconfig)
        install_crd(kubectl)
        job = tfjob(name="polled")
        job["metadata"]["namespace"] = "default"
        kubectl.apply(job)
        reads = Reads(plane.kubeconfig)
        queries = {
            "a TFJob by name": ("tfjobs.tfjob.dev", "polled", "-n", "default"),
            "pods by label": ("pods", "-n", "default", "-l", "tfjob.dev/job-name=polled"),
        }
        print(f"{'read':<18} {'how':<22} {'ms/read':>8} {'CPU ms/read':>12}")
        for what, query in queries.items():
            for how, read in (
                ("kubectl get -o json", lambda q=query: kubectl.get_json(*q)),
                ("API client (reads.py)", lambda q=query: reads.get(*q)),
            ):
                wall, used = measure(read, args.reads)
                print(f"{what:<18} {how:<22} {wall * 1000:>8.1f} {used * 1000:>12.1f}")


if __name__ == "__main__":
    main()
