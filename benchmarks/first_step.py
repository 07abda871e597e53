"""`kubectl apply` to the chief's first step, beside Kubeflow's training-operator, on the real node.

The same `kubeflow.org/v1` TFJob (mnist-ps as shipped: a chief, a parameter server, two
workers, the trainer image built here, with `--log-every=10`; no checkpoint volume, which
training-operator has no field for) goes through each controller in turn, in a namespace of its
own, one job at a time, alternating which goes first:

- ours: a second release of the chart, as `make cluster` installs it, serving `kubeflow.org`
  and watching only its namespace (the release that serves `tfjob.dev` stays installed, idle);
- training-operator v1.9.4, built from its Go module (`tfjob_testbed.addons.peer`), with its own
  CRD, flags and client defaults, watching only its namespace; it runs as a process on the host
  rather than in a pod, which changes none of the times below.

Each phase ends when the last of the job's 4 pods gets there, timed from `kubectl apply` on the
host's wall clock (`startup.start_one`): pods created, bound to the node, trainer processes
started, every task ready (TensorFlow imported, data read, every peer's DNS record found: the
TF_CONFIG cluster reachable), and the chief's first report (10 steps). That job says
`cleanPodPolicy: All`: from its Succeeded condition (as the watch saw it) until every pod is
gone is its end. A second job, `cleanPodPolicy: None` (training-operator's default), is
deleted once it has Succeeded and its chief's pod too: from `kubectl delete` until the TFJob,
then every pod, is gone.

The cluster is what `make cluster` starts (tfjob_testbed.operator_cluster). Needs root.
Run: `python benchmarks/first_step.py --runs 5`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from startup import DEADLINE, JOB, PODS, Started, start_one

from tfjob_operator.api.spec import KUBEFLOW_GROUP
from tfjob_testbed.addons import peer
from tfjob_testbed.core.jobs import example
from tfjob_testbed.core.kube import Kubectl, wait_for
from tfjob_testbed.operator_cluster import CHART, OperatorCluster, running

RELEASE = "tfjob-kubeflow"
CONTROLLERS = {"ours": "ours", "training-operator": "peer"}  # name: its namespace


def job(extra: list[str], clean: str) -> dict:
    """mnist-ps as a Kubeflow user writes it: `kubeflow.org/v1`, no checkpoint section; what
    goes once it has finished (`clean`: its cleanPodPolicy)."""
    manifest = example(JOB, JOB, extra)
    manifest["apiVersion"] = f"{KUBEFLOW_GROUP}/v1"
    del manifest["spec"]["checkpoint"]
    manifest["spec"].setdefault("runPolicy", {})["cleanPodPolicy"] = clean
    return manifest


def phases(run: Started) -> dict[str, float]:
    """Seconds from apply to the moment the last pod reached each phase."""

    def last(kind: str) -> float:
        return max(run.marks.get((kind, pod))[0] for pod in PODS) - run.t0

    return {
        "created": last("created"),
        "scheduled": last("scheduled"),
        "started": run.last_started(),
        "ready": run.last_ready(),
    }


def one_run(cluster: OperatorCluster, namespace: str, all_: dict, none: dict) -> dict[str, float]:
    """The `cleanPodPolicy: All` job to its end, timed; then the `None` one, deleted."""
    run = start_one(cluster, namespace, all_, PODS, KUBEFLOW_GROUP)
    out = phases(run)
    out["first_step"] = run.first_step_at - run.t0
    chief = run.tasks[PODS[0]]
    out |= {f"chief {k}": chief.get(k, 0.0) for k in ("import", "data", "peers")}
    succeeded = run.marks.wait(("condition", JOB, "Succeeded"), DEADLINE)[0]
    wait_for(
        lambda: not cluster.get("pods", "-n", namespace).get("items"),
        DEADLINE,
        f"the pods of {namespace} gone",
        0.2,
    )
    gone = time.time()
    out["ended"] = gone - succeeded
    out["exit ended"] = gone - chief_exit(run)
    cluster.kubectl("delete", f"tfjobs.{KUBEFLOW_GROUP}", "--all", "-n", namespace, "--wait")
    start_one(cluster, namespace, none, PODS, KUBEFLOW_GROUP)
    # Deleted once the kubelet has finished the chief's pod (its phase Succeeded), the moment
    # training-operator says Succeeded; ours says so as the chief's exit shows, a second before.
    wait_for(
        lambda: cluster.get("pods", PODS[0], "-n", namespace)["status"].get("phase") == "Succeeded",
        DEADLINE,
        f"{PODS[0]} Succeeded",
        0.1,
    )
    out["job gone"], out["gone"], last = torn_down(cluster, namespace)
    print(f"  {namespace}: the last pods to go: {last}")
    return out


def chief_exit(run: Started) -> float:
    """When the API first showed the chief's container exited 0 (the kubelet's report): ours
    says Succeeded from that, training-operator from the pod's phase, which the kubelet reports
    once it has finished the pod (about a second later here)."""
    return min(
        mark[0]
        for key in run.marks.all()
        if key[:2] == ("terminated", PODS[0])
        and (mark := run.marks.get(key)) is not None
        and mark[1][0] == 0
    )


def torn_down(cluster: OperatorCluster, namespace: str) -> tuple[float, float, str]:
    """Delete the job (it has Succeeded, and returns at once): seconds until the TFJob is gone,
    until every pod is, and the last pods."""
    deleted = time.monotonic()
    cluster.kubectl("delete", f"tfjobs.{KUBEFLOW_GROUP}", "--all", "-n", namespace, "--wait=false")
    left: list[str] = []
    job_gone: list[float] = []

    def gone() -> bool:
        jobs = cluster.get(f"tfjobs.{KUBEFLOW_GROUP}", "-n", namespace).get("items")
        if not job_gone and not jobs:
            job_gone.append(time.monotonic() - deleted)
        pods = cluster.get("pods", "-n", namespace).get("items")
        left[:] = [p["metadata"]["name"] for p in pods] or left
        return bool(job_gone) and not pods

    wait_for(gone, DEADLINE, f"the pods of {namespace} gone", 0.2)
    return job_gone[0], time.monotonic() - deleted, ",".join(left)


ROWS = [
    ("created", "apply → every pod created"),
    ("scheduled", "apply → every pod bound to the node"),
    ("started", "apply → every trainer process started"),
    ("ready", "apply → every task ready (TF_CONFIG cluster reachable)"),
    ("first_step", "apply → chief's first report (10 steps)"),
    ("ended", "Succeeded → every pod gone (cleanPodPolicy All)"),
    ("exit ended", "the chief's exit 0 shown → every pod gone (cleanPodPolicy All)"),
    ("job gone", "TFJob deleted (chief's pod Succeeded, cleanPodPolicy None) → TFJob gone"),
    ("gone", "TFJob deleted (chief's pod Succeeded, cleanPodPolicy None) → every pod gone"),
    ("chief import", "aside: the chief's TensorFlow import"),
    ("chief data", "aside: the chief's data"),
    ("chief peers", "aside: the chief's wait for its peers' DNS records"),
]


def comparison(runs: dict[str, list[dict[str, float]]], title: str) -> None:
    names = list(runs)
    print(f"\n{title}\n")
    print("| phase | " + " | ".join(f"{n} p50 | {n} max" for n in names) + " |")
    print("|---|" + "---|---|" * len(names))
    for key, label in ROWS:
        cells = []
        for name in names:
            values = [r[key] for r in runs[name]]
            cells += [f"{statistics.median(values):.2f} s", f"{max(values):.2f} s"]
        print(f"| {label} | " + " | ".join(cells) + " |")


def install_ours(cluster: OperatorCluster, namespace: str) -> None:
    """The chart's second release, for `kubeflow.org`, on the CRD already there (the peer's)."""
    cluster.helm(
        "install", RELEASE, str(CHART), "--namespace", RELEASE, "--create-namespace",
        "--set", f"apiGroup={KUBEFLOW_GROUP}", "--set", "crds.install=false",
        "--set", f"watchNamespaces={{{namespace}}}", "--wait", "--timeout", "5m",
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100, help="mnist-ps's --steps")
    parser.add_argument(
        "--warm-up",
        type=int,
        default=1,
        help="untimed jobs through each controller first: the first job on a node reads the "
        "image's TensorFlow from disk, and would be charged to whichever controller went first",
    )
    a = parser.parse_args()
    extra = [f"--steps={a.steps}", "--log-every=10"]
    jobs = job(extra, "All"), job(extra, "None")
    with running() as cluster, tempfile.TemporaryDirectory() as work:
        kubectl = Kubectl(cluster.tools.kubectl, cluster.kubeconfig)
        for namespace in CONTROLLERS.values():
            cluster.kubectl("create", "namespace", namespace)
        peer.install_crd(kubectl)
        install_ours(cluster, CONTROLLERS["ours"])
        theirs = peer.PeerProcess(kubectl, Path(work) / "training-operator.log", "peer")
        theirs.start()
        try:
            for _ in range(a.warm_up):
                for name, namespace in CONTROLLERS.items():
                    warm = one_run(cluster, namespace, *jobs)
                    print(f"warm-up {name}: first step {warm['first_step']:.2f} s")
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in CONTROLLERS}
            for i in range(a.runs):
                order = list(CONTROLLERS) if i % 2 == 0 else list(reversed(CONTROLLERS))
                for name in order:
                    t = time.monotonic()
                    runs[name].append(one_run(cluster, CONTROLLERS[name], *jobs))
                    figures = ", ".join(f"{k} {v:.2f}" for k, v in runs[name][-1].items())
                    print(f"run {i + 1} {name} ({time.monotonic() - t:.0f} s): {figures}")
        finally:
            theirs.stop()
    comparison(
        runs,
        f"mnist-ps as `{KUBEFLOW_GROUP}/v1` (--steps={a.steps}, --log-every=10) on the real node, "
        f"{a.runs} runs each after {a.warm_up} untimed, alternating; ours (the chart) beside "
        f"training-operator {peer.version()}:",
    )


if __name__ == "__main__":
    main()
