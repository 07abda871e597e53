"""The operator at scale: 1000 TFJobs, a burst of 100, every API request, and its idle cost.

On one real control plane (the API server's audit log keeps every request with its client's user
agent), with the operator as its own process:

1. a burst of `--burst` TFJobs created at once: p50/p99 from each create to its 4 children;
2. `--jobs` TFJobs created at once: time until every child is in place, the operator's CPU and
   RSS meanwhile;
3. every pod of both sets reported Running, then worker 0 exiting 0, as a kubelet would: each
   job goes Succeeded and the operator scales it down;
4. `--idle` seconds with every job finished: the operator's requests (the target is none), CPU
   and RSS;
5. the operator stopped, a bare client loop creates the same children for `--jobs` jobs on the
   same API server: the floor.

Then it prints tables, among them the operator's requests per job from create to Succeeded, by
verb and resource. Run: `python benchmarks/operator_scale.py --jobs 1000`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
from create_jobs import REPLICAS, add_qps_argument, create_at_once, pct, rss_mb, run_bare

from tfjob_operator.api.spec import GROUP, PLURAL, VERSION
from tfjob_operator.rules import status as st
from tfjob_testbed.controlplane import AUDIT_EVERYTHING, ControlPlane, ensure_binaries
from tfjob_testbed.jobs import container_status
from tfjob_testbed.kube import Kubectl, wait_for
from tfjob_testbed.operator import OperatorProcess
from tfjob_testbed.paths import scratch_dir
from tfjob_testbed.sandbox import install_crd
from tfjob_testbed.tools import ensure_tools

PODS_PER_JOB = sum(REPLICAS.values())
# The operator's own requests, its API client's and kopf's (watches, Events), carry this user
# agent (kopf's said `kopf/` before they were made one).
OPERATOR_AGENTS = ("tfjob-operator/", "kopf/")
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


@dataclass
class Audit:
    """The operator's requests in the audit log, read from a byte offset on."""

    path: Path
    offset: int = 0

    def mark(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def requests(self, start: int, end: int | None = None) -> list[dict[str, Any]]:
        """The operator's requests logged between two marks, one entry per request."""
        seen: dict[str, dict[str, Any]] = {}
        with self.path.open("rb") as f:
            f.seek(start)
            data = f.read() if end is None else f.read(end - start)
        for line in data.splitlines():
            if b"tfjob-operator/" not in line and b"kopf/" not in line:
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line still being written
            if str(event.get("userAgent", "")).startswith(OPERATOR_AGENTS):
                seen.setdefault(event["auditID"], event)
        return list(seen.values())


def what(event: dict[str, Any]) -> tuple[str, str]:
    ref = event.get("objectRef") or {}
    resource = ref.get("resource", event.get("requestURI", "?"))
    if ref.get("subresource"):
        resource += "/" + ref["subresource"]
    return event["verb"], resource


@dataclass
class Sample:
    """CPU seconds and RSS of the operator over one phase."""

    pid: int
    cpu0: float = field(init=False)
    t0: float = field(init=False)

    def __post_init__(self) -> None:
        self.cpu0, self.t0 = cpu_seconds(self.pid), time.monotonic()

    def end(self) -> dict[str, float]:
        rss, peak = rss_mb(self.pid)
        wall = time.monotonic() - self.t0
        cpu = cpu_seconds(self.pid) - self.cpu0
        return {"wall": wall, "cpu": cpu, "rss": rss, "peak": peak}


def states(custom: kubernetes.client.CustomObjectsApi, ns: str) -> Counter[str]:
    items = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]
    return Counter(st.state(i.get("status") or {}) for i in items)


def wait_states(custom, namespaces: dict[str, int], state: str, timeout: float) -> None:
    def all_there() -> bool:
        return all(states(custom, ns)[state] == n for ns, n in namespaces.items())

    wait_for(all_there, timeout, f"every job {state}", interval=2.0)


def report_pods(
    core: kubernetes.client.CoreV1Api, namespaces: dict[str, int], only: str = "", **cs: Any
) -> None:
    """Report the container of every pod (whose name ends with `only`) as
    `container_status(**cs)` says, as a kubelet would."""

    def count(ns: str) -> int:
        """Pods in a namespace, without listing them all (which loads the API server)."""
        page = core.list_namespaced_pod(ns, limit=1)
        return len(page.items) + (page.metadata.remaining_item_count or 0)

    todo: list[tuple[str, str]] = []
    for ns, n in namespaces.items():
        want = n * PODS_PER_JOB
        wait_for(lambda ns=ns, want=want: count(ns) == want, 1800, f"{want} pods in {ns}", 2.0)
        names = [p.metadata.name for p in core.list_namespaced_pod(ns).items]
        todo += [(ns, p) for p in names if p.endswith(only)]
    body = {
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "containerStatuses": [container_status(**cs)],
        }
    }
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda t: core.patch_namespaced_pod_status(t[1], t[0], body), todo))


def wait_quiet(audit: Audit, since: int, quiet: float, timeout: float) -> None:
    """Until the operator has sent nothing for `quiet` seconds (it is done with the jobs); reads
    only what the log gained since the last look."""
    last = {"offset": since, "at": time.monotonic()}

    def settled() -> bool:
        end, now = audit.mark(), time.monotonic()
        if audit.requests(last["offset"], end):
            last["at"] = now
        last["offset"] = end
        return now - last["at"] >= quiet

    wait_for(settled, timeout, "the operator to fall quiet", interval=1.0)


def table(title: str, rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    print(f"\n{title}")
    print(f"{'measure'.ljust(width)} | value")
    print(f"{'-' * width}-|-{'-' * 24}")
    for k, v in rows:
        print(f"{k.ljust(width)} | {v}")


def per_job_table(
    events: list[dict[str, Any]],
    namespaces: dict[str, int],
    span: str = "from create to Succeeded and scaled down",
) -> None:
    """Requests per job by verb and resource: those on the jobs' namespaces, per job; the
    cluster-wide ones (watches, lists) as counts."""
    jobs = sum(namespaces.values())
    scoped: Counter[tuple[str, str]] = Counter()
    wide: Counter[tuple[str, str]] = Counter()
    for e in events:
        ns = (e.get("objectRef") or {}).get("namespace")
        if ns in namespaces:
            scoped[what(e)] += 1
        elif ns is None:
            wide[what(e)] += 1
    print(f"\nOperator requests {span} ({jobs} jobs)")
    print(f"{'verb':<8} | {'resource':<24} | {'total':>6} | per job")
    print(f"{'-' * 8}-|-{'-' * 24}-|-{'-' * 6}-|--------")
    for (verb, res), count in sorted(scoped.items()):
        print(f"{verb:<8} | {res:<24} | {count:>6} | {count / jobs:.2f}")
    total = sum(scoped.values())
    writes = sum(c for (v, _), c in scoped.items() if v in {"create", "patch", "update", "delete"})
    print(f"{'all':<8} | {'':<24} | {total:>6} | {total / jobs:.2f}  (writes {writes / jobs:.2f})")
    for (verb, res), count in sorted(wide.items()):
        print(f"{verb:<8} | {res + ' (cluster-wide)':<24} | {count:>6} |")


class _CreatedOnly(Exception):
    """--no-lifecycle: the creation phases are done."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--idle", type=float, default=60.0, help="seconds of idle to watch")
    parser.add_argument(
        "--no-lifecycle",
        action="store_true",
        help="stop after the creation phases (steps 3 and 4 skipped): at several thousand jobs "
        "the controller-manager's own 20 requests/s make their pods for most of an hour",
    )
    parser.add_argument(
        "--operator-src",
        type=Path,
        help="run the operator package from this directory (another checkout's operator/), "
        "to measure two versions on equal terms",
    )
    add_qps_argument(parser)
    args = parser.parse_args()
    work = scratch_dir("tfjob-scale-")
    tools = ensure_tools()
    with ControlPlane(work / "plane", ensure_binaries(), audit_policy=AUDIT_EVERYTHING) as plane:
        kubectl = Kubectl(tools.kubectl, plane.kubeconfig)
        install_crd(kubectl)
        api = kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig))
        core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
        audit = Audit(plane.audit_log)
        # An older checkout (--operator-src) has no rate limit to turn off.
        limit = [] if args.operator_src else [f"--kube-api-qps={args.kube_api_qps}"]
        operator = OperatorProcess(
            plane.kubeconfig, work / "operator.log", ["--log-level=info", *limit]
        )
        if args.operator_src:
            operator.env["PYTHONPATH"] = str(args.operator_src.resolve())
        operator.start()
        pid = operator.proc.pid
        try:
            namespaces = {"burst": args.burst, "scale": args.jobs}
            for ns in namespaces:
                kubectl("create", "namespace", ns)
            empty = Sample(pid).end()
            begin = audit.mark()
            _, burst = create_at_once(api, "burst", args.burst, "b", timeout=1800)
            creating = Sample(pid)
            _, scale = create_at_once(api, "scale", args.jobs, "job", timeout=1800)
            created = creating.end()
            if args.no_lifecycle:
                life = audit.requests(begin, audit.mark())
                raise _CreatedOnly
            running = Sample(pid)
            report_pods(core, namespaces)
            wait_states(custom, namespaces, "Running", 1800)
            report_pods(core, namespaces, state="terminated", exit_code=0, only="worker-0")
            wait_states(custom, namespaces, "Succeeded", 1800)
            wait_quiet(audit, begin, 10.0, 600)
            lifetime = running.end()
            end_of_life = audit.mark()
            idle = Sample(pid)
            time.sleep(args.idle)  # the measured idle window itself
            idled = idle.end()
            idle_requests = audit.requests(end_of_life)
            life = audit.requests(begin, end_of_life)
        except _CreatedOnly:
            lifetime = idled = None
        finally:
            operator.stop()
        bare = run_bare(api, kubectl, args.jobs, "bare")

    n = args.jobs
    table(
        f"{args.burst} TFJobs (PS=1, Worker=2) created at once",
        [
            ("create -> children p50", f"{statistics.median(burst['latencies']):.3f} s"),
            ("create -> children p99", f"{pct(burst['latencies'], 99):.3f} s"),
            ("create -> children max", f"{max(burst['latencies']):.3f} s"),
            (f"all {args.burst} jobs' children", f"{burst['total']:.2f} s"),
        ],
    )
    table(
        f"{n} TFJobs created at once ({n * 4} children), beside a bare client loop",
        [
            (f"operator: all {n} jobs' children", f"{scale['total']:.2f} s"),
            ("operator: create -> children p50", f"{statistics.median(scale['latencies']):.2f} s"),
            ("operator: create -> children p99", f"{pct(scale['latencies'], 99):.2f} s"),
            (f"bare loop: all {n} jobs' children", f"{bare['total']:.2f} s"),
            ("ratio operator / bare", f"{scale['total'] / bare['total']:.2f}x"),
        ],
    )
    jobs = args.jobs + args.burst
    if lifetime is None or idled is None:
        table(
            f"Operator process (RSS, CPU seconds from /proc; {jobs} jobs created, no pod yet)",
            [
                ("RSS with no job", f"{empty['rss']:.0f} MiB"),
                (
                    f"creating {n} jobs: CPU / wall",
                    f"{created['cpu']:.1f} / {created['wall']:.1f} s",
                ),
                (f"RSS after creating {n}", f"{created['rss']:.0f} MiB"),
            ],
        )
        per_job_table(life, namespaces, "from create to children")
        return
    table(
        f"Operator process (RSS, CPU seconds from /proc; {jobs} jobs in the end)",
        [
            ("RSS with no job", f"{empty['rss']:.0f} MiB"),
            (
                f"creating {n} jobs: CPU / wall",
                f"{created['cpu']:.1f} / {created['wall']:.1f} s",
            ),
            (f"RSS after creating {n}", f"{created['rss']:.0f} MiB"),
            (
                "pods Running -> Succeeded -> scaled down: CPU / wall",
                f"{lifetime['cpu']:.1f} / {lifetime['wall']:.1f} s",
            ),
            (f"idle {args.idle:.0f} s, {jobs} finished jobs: CPU", f"{idled['cpu']:.2f} s"),
            (f"RSS idle with {jobs} finished jobs", f"{idled['rss']:.0f} MiB"),
            ("peak RSS", f"{idled['peak']:.0f} MiB"),
            (f"requests while idle {args.idle:.0f} s", str(len(idle_requests))),
        ],
    )
    if idle_requests:
        print("idle requests:", Counter(what(e) for e in idle_requests).most_common(10))
    per_job_table(life, namespaces)


if __name__ == "__main__":
    main()
