"""mnist-ps on the real node: `kubectl apply` → first training step and → Succeeded, beside
`tfjob run` of the same manifest, plus the time `make cluster` takes to come up.

The cluster is what `make cluster` starts (tfjob_testbed.operator_cluster): the images built
from the Dockerfile, containerd + kubelet + kube-scheduler + kube-proxy, the operator from its
Helm chart in a pod. Needs root. Run: `python benchmarks/real_node.py --runs 3 --steps 300`.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml

from tfjob_protocol.result import parse_last
from tfjob_testbed.core.jobs import example
from tfjob_testbed.core.paths import scratch_dir
from tfjob_testbed.operator_cluster import OperatorCluster, running

STEP = re.compile(r"^step \d+", re.MULTILINE)
POLL = 0.1
DEADLINE = 900

# The phases of one run, in the order they happen, as (key, row label).
CLUSTER_PHASES = [
    ("applied", "kubectl apply returned"),
    ("children", "StatefulSets + Services exist"),
    ("pods", "all pods exist"),
    ("running", "all containers running"),
    ("first_step", "chief's first training step"),
    ("succeeded", "TFJob Succeeded"),
]


def one_real_run(cluster: OperatorCluster, extra: list[str]) -> dict[str, float]:
    """Apply mnist-ps in a fresh namespace; time each phase from the API and the chief's log."""
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    job = example("mnist-ps", "mnist-ps", extra)
    pods = [
        f"mnist-ps-{rt.lower()}-{i}"
        for rt, rs in job["spec"]["tfReplicaSpecs"].items()
        for i in range(rs.get("replicas", 1))
    ]
    chief = "mnist-ps-chief-0"

    def get(*args: str) -> dict:
        return cluster.get(*args, "-n", ns)

    def running_pods() -> bool:
        found = {p["metadata"]["name"]: p for p in get("pods").get("items", [])}
        return all(
            name in found
            and any(
                "running" in cs["state"]
                for cs in found[name]["status"].get("containerStatuses") or []
            )
            for name in pods
        )

    def chief_log() -> str:
        return cluster.logs(chief, ns)

    def succeeded() -> bool:
        conds = get("tfjob", "mnist-ps").get("status", {}).get("conditions") or []
        true = {c["type"] for c in conds if c["status"] == "True"}
        if "Failed" in true:
            raise RuntimeError(f"mnist-ps failed: {conds}")
        return "Succeeded" in true

    at: dict[str, float] = {}
    log = ""
    t0 = time.monotonic()
    subprocess.run(
        [str(cluster.tools.kubectl), "--kubeconfig", str(cluster.kubeconfig), "apply", "-n", ns,
         "-f", "-"],
        input=yaml.safe_dump(job), check=True, capture_output=True, text=True,
    )  # fmt: skip
    at["applied"] = time.monotonic() - t0

    def first_step() -> bool:
        nonlocal log
        log = chief_log()
        return bool(STEP.search(log))

    def succeeded_with_log() -> bool:
        # The chief's log is read until the job ends: its result line is the last it prints,
        # and the pod goes at the scale-down that follows success.
        nonlocal log
        log = chief_log() or log
        return succeeded()

    checks = [
        ("children", lambda: len(get("statefulsets").get("items", [])) == 3),
        ("pods", lambda: len(get("pods").get("items", [])) == len(pods)),
        ("running", running_pods),
        ("first_step", first_step),
        ("succeeded", succeeded_with_log),
    ]
    for key, check in checks:
        while not check():
            if time.monotonic() - t0 > DEADLINE:
                raise TimeoutError(f"{key} not reached in {DEADLINE}s")
            time.sleep(POLL)
        at[key] = time.monotonic() - t0
    result = parse_last(log)
    cluster.kubectl("delete", "namespace", ns, "--wait=false")
    at["test_accuracy"] = (result or {}).get("test_accuracy") or float("nan")
    return at


def one_local_run(workdir: Path, extra: list[str]) -> dict[str, float]:
    """The same manifest through `tfjob run`: local processes on 127.0.0.1, no cluster."""
    workdir = workdir / f"local-{uuid.uuid4().hex[:6]}"  # no checkpoint from an earlier run
    workdir.mkdir()
    path = workdir / "mnist-ps.yaml"
    path.write_text(yaml.safe_dump(example("mnist-ps", "mnist-ps", extra)))
    at: dict[str, float] = {}
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfjob_operator.cli", "run", str(path), "--workdir", str(workdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if "first_step" not in at and line.startswith("[chief-0] step "):
            at["first_step"] = time.monotonic() - t0
        result = parse_last(line.removeprefix("[chief-0] ")) if "[chief-0]" in line else None
        if result is not None:
            at["trainer_first_step"] = result.get("first_step_sec") or float("nan")
            at["test_accuracy"] = result.get("test_accuracy") or float("nan")
    if proc.wait() != 0:
        raise RuntimeError(f"tfjob run exited {proc.returncode}")
    at["succeeded"] = time.monotonic() - t0
    return at


def table(title: str, rows: list[tuple[str, str]], runs: list[dict[str, float]]) -> None:
    head = ["measure", *[f"run {i + 1}" for i in range(len(runs))], "median"]
    print(f"\n{title}\n")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for key, label in rows:
        values = [r.get(key, float("nan")) for r in runs]
        unit = "" if key == "test_accuracy" else " s"
        fmt = "{:.3f}" if key == "test_accuracy" else "{:.2f}"
        cells = [fmt.format(v) + unit for v in [*values, statistics.median(values)]]
        print(f"| {label} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300, help="the example's --steps")
    a = parser.parse_args()
    extra = [f"--steps={a.steps}"]
    with running() as cluster:
        bring_up = dict(cluster.timings)
        real = [one_real_run(cluster, extra) for _ in range(a.runs)]
    work = scratch_dir("tfjob-bench-node-")
    local = [one_local_run(work, extra) for _ in range(a.runs)]
    print("\n`make cluster` bring-up, this run (seconds):\n")
    print("| part | s |\n|---|---|")
    for part, seconds in bring_up.items():
        print(f"| {part} | {seconds:.1f} |")
    accuracy = [("test_accuracy", "chief's test accuracy")]
    table(
        f"mnist-ps (--steps={a.steps}) on the real node, seconds from `kubectl apply`:",
        [*CLUSTER_PHASES, *accuracy],
        real,
    )
    table(
        f"mnist-ps (--steps={a.steps}) with `tfjob run`, seconds from its start:",
        [("first_step", "chief's first training step"), ("succeeded", "exited 0"), *accuracy],
        local,
    )


if __name__ == "__main__":
    main()
