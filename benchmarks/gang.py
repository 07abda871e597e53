"""Gangs on the real node: `kubectl apply` → every pod bound, for a job of 1+1+4 and of 1+1+16
pods (Chief, PS, Workers), made a gang of Kubernetes' own (the chart's `auto`) and not
(`gangScheduling.provider=none`), on the same node in the same run; and what the gang costs the
operator in API requests per job, from the API server's audit log.

The pods sleep (they ask for 10m of CPU each, so every shape fits); what is timed is the
scheduling. Needs root. Run: `python benchmarks/gang.py --runs 3`.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections import Counter
from typing import Any

from tfjob_testbed.core.jobs import template, tfjob
from tfjob_testbed.operator_cluster import CHART, NAMESPACE, RELEASE, OperatorCluster, running

POLL = 0.05
DEADLINE = 300
SHAPES = {
    "1+1+4": {"Chief": 1, "PS": 1, "Worker": 4},
    "1+1+16": {"Chief": 1, "PS": 1, "Worker": 16},
}
MODES = {"gang (kubernetes)": "auto", "no gang": "none"}
OPERATOR_AGENT = "tfjob-operator"


def provider(cluster: OperatorCluster, value: str) -> None:
    """The chart's operator with `gangScheduling.provider=value`, rolled out."""
    cluster.helm(
        "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
        "--set", f"gangScheduling.provider={value}", "--wait", "--timeout", "5m",
    )  # fmt: skip
    cluster.kubectl("rollout", "status", "deployment", "--namespace", NAMESPACE, "--timeout=300s")


def sleeper(name: str, replicas: dict[str, int]) -> dict[str, Any]:
    body = tfjob(name=name, replicas=replicas, restart_policy="Never")
    for rs in body["spec"]["tfReplicaSpecs"].values():
        rs["template"] = template(
            "tfjob-operator/trainer:0.1.0",
            ["sleep", "600"],
            resources={"requests": {"cpu": "10m", "memory": "16Mi"}},
        )
    del body["metadata"]["namespace"]
    return body


def one_run(cluster: OperatorCluster, replicas: dict[str, int]) -> tuple[float, str]:
    """Seconds from apply to every pod bound; the namespace it ran in (deleted after)."""
    ns = f"gang-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", ns)
    want = sum(replicas.values())
    started = time.monotonic()
    cluster.apply(sleeper("bench", replicas), ns)
    while time.monotonic() - started < DEADLINE:
        pods = cluster.reads.get("pods", "-n", ns) or {}
        if sum(1 for p in pods.get("items") or [] if p["spec"].get("nodeName")) == want:
            took = time.monotonic() - started
            break
        time.sleep(POLL)
    else:
        raise SystemExit(f"{want} pods not bound within {DEADLINE}s in {ns}")
    # The job first, its pods gone with it; then its namespace.
    cluster.kubectl(
        "delete", "tfjobs.tfjob.dev", "bench", "-n", ns, "--wait=true", "--timeout=300s"
    )
    cluster.kubectl("delete", "namespace", ns, "--wait=true", "--timeout=300s")
    return took, ns


def operator_writes(cluster: OperatorCluster, namespaces: list[str]) -> Counter[str]:
    """The operator's writes in those namespaces, by verb and resource, per job."""
    plane = cluster.node.plane if cluster.node else None
    assert plane is not None, "the audit log is the real node's plane's"
    writes: Counter[str] = Counter()
    for e in plane.audit():
        ref = e.get("objectRef") or {}
        if (
            ref.get("namespace") in namespaces
            and e.get("verb") in ("create", "patch", "update", "delete")
            and e.get("userAgent", "").startswith(OPERATOR_AGENT)
            and e.get("stage") == "ResponseComplete"
        ):
            sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
            writes[f"{e['verb']} {ref.get('resource')}{sub}"] += 1
    return writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    a = parser.parse_args()
    times: dict[tuple[str, str], list[float]] = {}
    used: dict[str, list[str]] = {}
    with running() as cluster:
        for mode, value in MODES.items():
            provider(cluster, value)
            for shape, replicas in SHAPES.items():
                for _ in range(a.runs):
                    took, ns = one_run(cluster, replicas)
                    times.setdefault((mode, shape), []).append(took)
                    used.setdefault(mode, []).append(ns)
        per_job = {m: operator_writes(cluster, ns) for m, ns in used.items()}
    print(f"\napply → every pod bound, seconds ({a.runs} runs each, p50 [min-max]):\n")
    print("| pods | " + " | ".join(MODES) + " |")
    print("|---|" + "---|" * len(MODES))
    for shape in SHAPES:
        cells = []
        for mode in MODES:
            t = times[(mode, shape)]
            cells.append(f"{statistics.median(t):.2f} [{min(t):.2f}-{max(t):.2f}]")
        print(f"| {shape} | " + " | ".join(cells) + " |")
    jobs = a.runs * len(SHAPES)
    print(f"\nthe operator's writes per job (over {jobs} jobs each):\n")
    keys = sorted(set().union(*per_job.values()))
    print("| write | " + " | ".join(MODES) + " |")
    print("|---|" + "---|" * len(MODES))
    for key in keys:
        print(f"| {key} | " + " | ".join(f"{per_job[m][key] / jobs:.1f}" for m in MODES) + " |")
    totals = " | ".join(f"{sum(per_job[m].values()) / jobs:.1f}" for m in MODES)
    print(f"| all | {totals} |")


if __name__ == "__main__":
    main()
