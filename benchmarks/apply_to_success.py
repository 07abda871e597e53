"""Time from `kubectl apply` of mnist-ps to its first training step and to Succeeded.

The whole chain of the local end-to-end bed: kube-apiserver, kube-controller-manager, the
operator as its own process, and the node agent (tests/support/nodeagent.py) running every pod
as TensorFlow processes in network namespaces. The same manifest through `tfjob run` (local
processes, no cluster) is the floor. Prints one column per run and the median. Needs root.
Run: `python benchmarks/apply_to_success.py --runs 3` (add `--steps 200` for a quick look).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import kubernetes
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.jobs import example  # noqa: E402
from tests.support.kube import wait_for  # noqa: E402
from tests.support.nodeagent import NodeAgent, network_namespaces_work  # noqa: E402
from tests.support.sandbox import Stack, stack  # noqa: E402
from tfjob_operator import status as st  # noqa: E402
from tfjob_operator.api import GROUP, PLURAL, VERSION  # noqa: E402
from tfjob_operator.localrun import result_of  # noqa: E402

STEP = re.compile(r"^step \d+", re.MULTILINE)
POLL = 0.05  # this script's checks
AGENT_POLL = 0.1  # the node agent lists pods and StatefulSets this often: a kubelet is not free
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


def one_cluster_run(s: Stack, workdir: Path, extra: list[str]) -> dict[str, float]:
    """Apply the job in a fresh namespace with its own node agent; time each phase."""
    core = kubernetes.client.CoreV1Api(s.api)
    apps = kubernetes.client.AppsV1Api(s.api)
    custom = kubernetes.client.CustomObjectsApi(s.api)
    ns = f"bench-{uuid.uuid4().hex[:6]}"
    s.kubectl("create", "namespace", ns)
    # Pods need the namespace's default ServiceAccount.
    wait_for(lambda: core.list_namespaced_service_account(ns).items, 60, f"default SA in {ns}")
    job = example("mnist-ps", "mnist-ps", extra)
    pods = [
        f"mnist-ps-{rt.lower()}-{i}"
        for rt, rs in job["spec"]["tfReplicaSpecs"].items()
        for i in range(rs.get("replicas", 1))
    ]
    chief = "mnist-ps-chief-0"
    at: dict[str, float] = {}
    with NodeAgent(core, ns, workdir / ns, interval=AGENT_POLL) as agent:
        t0 = time.monotonic()
        s.kubectl.apply(job, namespace=ns)
        at["applied"] = time.monotonic() - t0

        def children() -> bool:
            sets = apps.list_namespaced_stateful_set(ns).items
            services = core.list_namespaced_service(ns).items
            return len(sets) == 3 and len(services) == 3

        def listed_pods() -> dict[str, Any]:
            return {p.metadata.name: p for p in core.list_namespaced_pod(ns).items}

        def running() -> bool:
            found = listed_pods()
            return all(
                p in found
                and any(cs.state.running for cs in found[p].status.container_statuses or [])
                for p in pods
            )

        def succeeded() -> bool:
            assert not agent.errors, agent.errors
            body = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "mnist-ps")
            status = body.get("status") or {}
            if st.is_true(status, st.Cond.FAILED):
                raise RuntimeError(f"mnist-ps failed: {status}")
            return st.is_true(status, st.Cond.SUCCEEDED)

        checks = [
            ("children", children),
            ("pods", lambda: set(pods) <= set(listed_pods())),
            ("running", running),
            ("first_step", lambda: STEP.search(agent.log(chief, 0))),
            ("succeeded", succeeded),
        ]
        for key, check in checks:
            while not check():
                if time.monotonic() - t0 > DEADLINE:
                    raise TimeoutError(f"{key} not reached in {DEADLINE}s")
                time.sleep(POLL)
            at[key] = time.monotonic() - t0
        result = result_of(agent.log(chief, 0)) or {}
    s.kubectl("delete", "namespace", ns, "--wait=false")
    at["trainer_first_step"] = result.get("first_step_sec") or float("nan")
    at["test_accuracy"] = result.get("test_accuracy") or float("nan")
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
        result = result_of(line.removeprefix("[chief-0] ")) if "[chief-0]" in line else None
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
    parser.add_argument("--steps", type=int, help="override the example's --steps")
    a = parser.parse_args()
    why = network_namespaces_work()
    if why:
        sys.exit(f"the node agent needs network namespaces: {why}")
    extra = [f"--steps={a.steps}"] if a.steps else []
    work = Path(tempfile.mkdtemp(prefix="tfjob-bench-e2e-"))
    with stack(work) as s:
        cluster = [one_cluster_run(s, work, extra) for _ in range(a.runs)]
    local = [one_local_run(work, extra) for _ in range(a.runs)]
    extras = [
        ("trainer_first_step", "chief process start → first step (trainer's own figure)"),
        ("test_accuracy", "chief's test accuracy"),
    ]
    steps = f"--steps={a.steps}" if a.steps else "as shipped"
    table(
        f"mnist-ps ({steps}) on the local control plane, seconds from `kubectl apply`:",
        [*CLUSTER_PHASES, *extras],
        cluster,
    )
    table(
        f"mnist-ps ({steps}) with `tfjob run`, seconds from its start:",
        [("first_step", "chief's first training step"), ("succeeded", "exited 0"), *extras],
        local,
    )


if __name__ == "__main__":
    main()
