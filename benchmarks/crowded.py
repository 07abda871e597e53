"""The operator on a crowded cluster: what other tenants' pods cost it.

On one real control plane, twice, each time with a fresh operator process:

1. alone: `--jobs` TFJobs (PS=1, Worker=2) created, their pods reported Running, then worker 0
   exiting 0, as a kubelet would, until every job is Succeeded;
2. crowded: the same, while `--foreign` pods of other tenants (realistic bodies: three
   containers, env, annotations, probes; no label of ours) are created in their own
   namespaces and each relabelled `--updates` times.

It prints the operator's CPU seconds (from /proc) and RSS (current and peak) for both runs and
their difference: the cost of objects the operator never acts on. Run:
`python benchmarks/crowded.py --foreign 10000`.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes
from create_jobs import create_at_once
from scale_measure import Sample
from scale_report import table
from scale_run import report_pods, wait_states

from tfjob_testbed.controlplane.binaries import ensure_binaries
from tfjob_testbed.controlplane.plane import ControlPlane
from tfjob_testbed.core.kube import Kubectl, wait_for
from tfjob_testbed.core.paths import scratch_dir
from tfjob_testbed.core.tools import ensure_tools
from tfjob_testbed.project.operator import OperatorProcess
from tfjob_testbed.sandbox import install_crd

TENANTS = 10  # the foreign pods are spread over this many namespaces


def foreign_pod(name: str) -> dict[str, Any]:
    """Another team's web pod, as such pods look: a sidecar and an init container, env,
    annotations, probes and resources; about 4 KB of JSON."""

    def container(cname: str, image: str, probes: bool = True) -> dict[str, Any]:
        probed = {
            "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
            "livenessProbe": {"httpGet": {"path": "/live", "port": 8080}, "periodSeconds": 10},
        }
        return {
            "name": cname,
            "image": image,
            "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
            "env": [{"name": f"SETTING_{i}", "value": f"value-{i}-" + "x" * 24} for i in range(12)],
            "resources": {
                "requests": {"cpu": "100m", "memory": "128Mi"},
                "limits": {"cpu": "500m", "memory": "256Mi"},
            },
            **(probed if probes else {}),
        }

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"app": "web", "team": "shop", "version": "v1", "tier": "frontend"},
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": "8080",
                "sidecar.example.com/inject": "true",
                "deploy.example.com/commit": "9f2c1e7a" * 5,
                "deploy.example.com/owner": "shop-team@example.com",
            },
        },
        "spec": {
            "initContainers": [
                container("migrate", "registry.example.com/shop/migrate:1.4", probes=False)
            ],
            "containers": [
                container("web", "registry.example.com/shop/web:1.4"),
                container("proxy", "registry.example.com/mesh/proxy:2.1"),
            ],
            "terminationGracePeriodSeconds": 30,
        },
    }


def crowd(api: kubernetes.client.ApiClient, pods: int, updates: int) -> dict[str, float]:
    """Create `pods` foreign pods over the tenants' namespaces, then relabel each `updates`
    times; the seconds each part took."""
    core = kubernetes.client.CoreV1Api(api)
    names = [(f"tenant-{i % TENANTS}", f"web-{i:05d}") for i in range(pods)]
    took: dict[str, float] = {}
    with ThreadPoolExecutor(8) as pool:
        t0 = time.monotonic()
        list(pool.map(lambda t: core.create_namespaced_pod(t[0], foreign_pod(t[1])), names))
        took["create"] = time.monotonic() - t0
        for round_ in range(updates):
            patch = {"metadata": {"labels": {"version": f"v{round_ + 2}"}}}
            t0 = time.monotonic()
            list(pool.map(lambda t, p=patch: core.patch_namespaced_pod(t[1], t[0], p), names))
            took[f"relabel {round_ + 1}"] = time.monotonic() - t0
    return took


def run_jobs(api: kubernetes.client.ApiClient, custom, core, ns: str, jobs: int) -> None:
    """`jobs` TFJobs from create to Succeeded, their pods driven as a kubelet would."""
    create_at_once(api, ns, jobs, "job", timeout=1800)
    report_pods(core, {ns: jobs})
    wait_states(custom, {ns: jobs}, "Running", 1800)
    report_pods(core, {ns: jobs}, state="terminated", exit_code=0, only="worker-0")
    wait_states(custom, {ns: jobs}, "Succeeded", 1800)


def measured(
    plane: ControlPlane, work: Path, name: str, body, src: Path | None
) -> dict[str, float]:
    """A fresh operator's CPU seconds and RSS over `body()`."""
    operator = OperatorProcess(
        plane.kubeconfig, work / f"operator-{name}.log", ["--log-level=info"]
    )
    if src is not None:
        operator.env["PYTHONPATH"] = str(src.resolve())
    operator.start()
    try:
        sample = Sample(operator.proc.pid)
        body()
        return sample.end()
    finally:
        operator.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--foreign", type=int, default=10000, help="foreign pods")
    parser.add_argument("--updates", type=int, default=2, help="relabels of each foreign pod")
    parser.add_argument(
        "--operator-src",
        type=Path,
        help="run the operator package from this directory (another checkout's operator/)",
    )
    args = parser.parse_args()
    work = scratch_dir("tfjob-crowded-")
    tools = ensure_tools()
    with ControlPlane(work / "plane", ensure_binaries()) as plane:
        kubectl = Kubectl(tools.kubectl, plane.kubeconfig)
        install_crd(kubectl)
        api = kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig))
        core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
        for ns in ["alone", "crowded", *(f"tenant-{i}" for i in range(TENANTS))]:
            kubectl("create", "namespace", ns)
            wait_for(lambda ns=ns: core.list_namespaced_service_account(ns).items, 60, ns)

        src = args.operator_src
        alone = measured(
            plane, work, "alone", lambda: run_jobs(api, custom, core, "alone", args.jobs), src
        )
        kubectl("delete", "namespace", "alone", "--timeout=600s")  # the crowded run starts level

        took: dict[str, float] = {}

        def crowded_run() -> None:
            with ThreadPoolExecutor(1) as side:
                crowding = side.submit(crowd, api, args.foreign, args.updates)
                run_jobs(api, custom, core, "crowded", args.jobs)
                took.update(crowding.result())

        crowded = measured(plane, work, "crowded", crowded_run, src)

    foreign = f"{args.foreign} foreign pods, {args.foreign * args.updates} updates"
    table(
        f"The operator with {args.jobs} TFJobs, alone and beside {foreign}",
        [
            ("alone: CPU / wall", f"{alone['cpu']:.1f} / {alone['wall']:.1f} s"),
            ("alone: RSS / peak", f"{alone['rss']:.0f} / {alone['peak']:.0f} MiB"),
            ("crowded: CPU / wall", f"{crowded['cpu']:.1f} / {crowded['wall']:.1f} s"),
            ("crowded: RSS / peak", f"{crowded['rss']:.0f} / {crowded['peak']:.0f} MiB"),
            ("foreign objects' cost: CPU", f"{crowded['cpu'] - alone['cpu']:+.2f} s"),
            ("foreign objects' cost: peak RSS", f"{crowded['peak'] - alone['peak']:+.1f} MiB"),
            *((f"bare client: {k} ({args.foreign} pods)", f"{v:.1f} s") for k, v in took.items()),
        ],
    )


if __name__ == "__main__":
    main()
