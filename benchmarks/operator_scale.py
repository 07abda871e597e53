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
   same API server: the floor;
6. (unless `--no-peer`; run between steps 4 and 5, so that no work the bare loop leaves to the
   controller-manager falls into it) the same `--jobs` TFJobs in `kubeflow.org/v1`, through
   Kubeflow's training-operator v1.9.4 (`tfjob_testbed.addons.peer`) on its own CRD in namespace
   `peer`, then through the operator with `--api-group kubeflow.org --namespace ours` on the
   operator's CRD (which replaces Kubeflow's in place, as a user moving over does), one after
   the other, each once the controller-manager has settled: from the first create until every
   pod exists and then through the same lifecycle as step 3, the controller's CPU, RSS and
   requests, and the CPU of kube-apiserver, kube-controller-manager and etcd.

Then it prints tables, among them the operator's requests per job from create to Succeeded, by
verb and resource. Run: `python benchmarks/operator_scale.py --jobs 1000`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from create_jobs import REPLICAS, add_qps_argument, create_at_once, pct, rss_mb, run_bare

from tfjob_operator.api.crd import crd
from tfjob_operator.api.spec import GROUP, KUBEFLOW_GROUP, PLURAL, VERSION
from tfjob_operator.rules import status as st
from tfjob_testbed.addons import peer
from tfjob_testbed.controlplane.plane import AUDIT_EVERYTHING, ControlPlane, ensure_binaries
from tfjob_testbed.core.jobs import container_status, tfjob
from tfjob_testbed.core.kube import Kubectl, wait_for
from tfjob_testbed.core.paths import scratch_dir
from tfjob_testbed.core.tools import ensure_tools
from tfjob_testbed.operator_cluster import CHART
from tfjob_testbed.project.operator import OperatorProcess
from tfjob_testbed.sandbox import install_crd

PODS_PER_JOB = sum(REPLICAS.values())
# The operator's own requests, its API client's and kopf's (watches, Events), carry this user
# agent (kopf's said `kopf/` before they were made one).
OPERATOR_AGENTS = ("tfjob-operator/", "kopf/")
TICK = os.sysconf("SC_CLK_TCK")
VERSION_PEER = peer.version().removeprefix("v")


@contextlib.contextmanager
def audited_plane(
    prefix: str, controller_manager_args: Sequence[str] = ()
) -> Iterator[tuple[Path, ControlPlane, Kubectl, kubernetes.client.ApiClient]]:
    """A control plane in a scratch directory named by `prefix`, whose audit log keeps every
    request, with the operator's CRD installed: (the directory, the plane, kubectl, a client)."""
    work = scratch_dir(prefix)
    tools = ensure_tools()
    with ControlPlane(
        work / "plane",
        ensure_binaries(),
        audit_policy=AUDIT_EVERYTHING,
        controller_manager_args=controller_manager_args,
    ) as plane:
        kubectl = Kubectl(tools.kubectl, plane.kubeconfig)
        install_crd(kubectl)
        api = kubernetes.config.new_client_from_config(config_file=str(plane.kubeconfig))
        yield work, plane, kubectl, api


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


@dataclass
class Audit:
    """One client's requests in the audit log (the operator's unless `agents` says otherwise),
    read from a byte offset on."""

    path: Path
    agents: tuple[str, ...] = OPERATOR_AGENTS

    def mark(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def requests(self, start: int, end: int | None = None) -> list[dict[str, Any]]:
        """The client's requests logged between two marks, one entry per request."""
        seen: dict[str, dict[str, Any]] = {}
        needles = [a.encode() for a in self.agents]
        with self.path.open("rb") as f:
            f.seek(start)
            data = f.read() if end is None else f.read(end - start)
        for line in data.splitlines():
            if not any(n in line for n in needles):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line still being written
            if str(event.get("userAgent", "")).startswith(self.agents):
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


def states(custom: kubernetes.client.CustomObjectsApi, ns: str, group: str = GROUP) -> Counter[str]:
    items = custom.list_namespaced_custom_object(group, VERSION, ns, PLURAL)["items"]
    return Counter(st.state(i.get("status") or {}) for i in items)


def wait_states(
    custom, namespaces: dict[str, int], state: str, timeout: float, group: str = GROUP
) -> None:
    def all_there() -> bool:
        return all(states(custom, ns, group)[state] == n for ns, n in namespaces.items())

    wait_for(all_there, timeout, f"every job {state}", interval=2.0)


def report_pods(
    core: kubernetes.client.CoreV1Api,
    namespaces: dict[str, int],
    only: str = "",
    phase: str = "Running",
    **cs: Any,
) -> None:
    """Report the container of every pod (whose name ends with `only`) as
    `container_status(**cs)` says, and the pod in `phase`, as a kubelet would."""

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
            "phase": phase,
            "podIP": "10.0.0.1",
            "containerStatuses": [container_status(**cs)],
        }
    }
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda t: core.patch_namespaced_pod_status(t[1], t[0], body), todo))


def wait_quiet(audit: Audit, since: int, quiet: float, timeout: float) -> None:
    """Until the client has sent nothing for `quiet` seconds (it is done with the jobs); reads
    only what the log gained since the last look."""
    last = {"offset": since, "at": time.monotonic()}

    def settled() -> bool:
        end, now = audit.mark(), time.monotonic()
        if audit.requests(last["offset"], end):
            last["at"] = now
        last["offset"] = end
        return now - last["at"] >= quiet

    wait_for(settled, timeout, f"{audit.agents[0]} to fall quiet", interval=1.0)


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
    who: str = "Operator",
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
    print(f"\n{who} requests {span} ({jobs} jobs)")
    print(f"{'verb':<8} | {'resource':<24} | {'total':>6} | per job")
    print(f"{'-' * 8}-|-{'-' * 24}-|-{'-' * 6}-|--------")
    for (verb, res), count in sorted(scoped.items()):
        print(f"{verb:<8} | {res:<24} | {count:>6} | {count / jobs:.2f}")
    total = sum(scoped.values())
    writes = sum(c for (v, _), c in scoped.items() if v in {"create", "patch", "update", "delete"})
    print(f"{'all':<8} | {'':<24} | {total:>6} | {total / jobs:.2f}  (writes {writes / jobs:.2f})")
    for (verb, res), count in sorted(wide.items()):
        print(f"{verb:<8} | {res + ' (cluster-wide)':<24} | {count:>6} |")


class PodWatch:
    """When each pod of a namespace first appeared, by its job (Kubeflow's job-name label, which
    the pods of both controllers carry), from a watch that reconnects until stopped."""

    LABEL = "training.kubeflow.org/job-name"

    def __init__(self, core: kubernetes.client.CoreV1Api, namespace: str) -> None:
        self.seen: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(core, namespace), daemon=True)
        self._thread.start()

    def _run(self, core: kubernetes.client.CoreV1Api, namespace: str) -> None:
        while not self._stop.is_set():
            w = kubernetes.watch.Watch()
            try:
                for ev in w.stream(core.list_namespaced_pod, namespace, timeout_seconds=120):
                    if self._stop.is_set():
                        w.stop()
                        return
                    meta = ev["object"].metadata
                    job = (meta.labels or {}).get(self.LABEL)
                    if job and ev["type"] in ("ADDED", "MODIFIED"):
                        with self._lock:
                            self.seen.setdefault(job, {}).setdefault(meta.name, time.monotonic())
            except Exception:
                if self._stop.is_set():
                    return
                time.sleep(0.5)  # a dropped watch: list and watch again

    def complete(self, jobs: list[str]) -> bool:
        with self._lock:
            return all(len(self.seen.get(j, {})) >= PODS_PER_JOB for j in jobs)

    def done_at(self, job: str) -> float:
        return max(self.seen[job].values())

    def stop(self) -> None:
        self._stop.set()


@dataclass
class Controller:
    """One controller of the comparison: how to start it, and how to tell its requests."""

    name: str
    namespace: str
    agents: tuple[str, ...]
    start: Callable[[], int]  # starts it, returns its pid
    stop: Callable[[], None]
    # The phase a kubelet reports for worker 0 once it exited 0: a bare pod with restartPolicy
    # Never (Kubeflow's) is Succeeded; a StatefulSet's pod (ours) stays Running, as step 3.
    worker_done_phase: str


def cpu_of(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def through(
    controller: Controller,
    api: kubernetes.client.ApiClient,
    plane: ControlPlane,
    n: int,
) -> dict[str, Any]:
    """`n` TFJobs (kubeflow.org/v1, cleanPodPolicy Running) created at once in the
    controller's namespace, until every pod exists, then every pod Running, worker 0 exiting 0,
    every job Succeeded and the controller quiet: times, CPU, RSS and requests."""
    core = kubernetes.client.CoreV1Api(api)
    custom = kubernetes.client.CustomObjectsApi(api)
    ns = controller.namespace
    audit = Audit(plane.audit_log, controller.agents)
    kcm_audit = Audit(plane.audit_log, ("kube-controller-manager/",))
    settle(kcm_audit)
    pid = controller.start()
    pids = plane.processes() | {"controller": pid}
    rss_start, _ = rss_mb(pid)
    names = [f"job-{i:04d}" for i in range(n)]
    created: dict[str, float] = {}

    def create(name: str) -> None:
        body = tfjob(name=name, namespace=ns, replicas=REPLICAS)
        body["apiVersion"] = f"{KUBEFLOW_GROUP}/{VERSION}"
        body["metadata"].pop("uid")
        body["spec"]["runPolicy"] = {"cleanPodPolicy": "Running"}
        custom.create_namespaced_custom_object(KUBEFLOW_GROUP, VERSION, ns, PLURAL, body)
        created[name] = time.monotonic()

    try:
        watch = PodWatch(core, ns)
        begin, cpu0, t0 = audit.mark(), cpu_of(pids), time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create, names))
        wait_for(lambda: watch.complete(names), 3600, f"pods of {n} jobs in {ns}", interval=0.1)
        watch.stop()
        t_pods, cpu_pods = time.monotonic(), cpu_of(pids)
        rss_pods, _ = rss_mb(pid)
        namespaces = {ns: n}
        report_pods(core, namespaces)
        wait_states(custom, namespaces, "Running", 1800, KUBEFLOW_GROUP)
        report_pods(
            core,
            namespaces,
            phase=controller.worker_done_phase,
            state="terminated",
            exit_code=0,
            only="worker-0",
        )
        wait_states(custom, namespaces, "Succeeded", 1800, KUBEFLOW_GROUP)
        # At a client limit of 20/s (--shipped) a controller cleans up after 1000 jobs for
        # more than 10 minutes.
        wait_quiet(audit, begin, 10.0, 3600)
        t_end, cpu_end, end = time.monotonic(), cpu_of(pids), audit.mark()
        rss_end, peak = rss_mb(pid)
    finally:
        controller.stop()
    latencies = [watch.done_at(j) - created[j] for j in names]
    return {
        "pods": max(watch.done_at(j) for j in names) - t0,
        "latencies": latencies,
        "lifecycle": t_end - t_pods,
        "wall": t_end - t0,
        "cpu_pods": {k: cpu_pods[k] - cpu0[k] for k in pids},
        "cpu": {k: cpu_end[k] - cpu0[k] for k in pids},
        "rss": (rss_start, rss_pods, rss_end, peak),
        "requests": audit.requests(begin, end),
        "kcm_requests": kcm_audit.requests(begin, end),
    }


def settle(audit: Audit, window: float = 5.0, most: int = 2, timeout: float = 1800) -> None:
    """Until the client (the controller-manager) sends at most `most` requests in `window`
    seconds: what an earlier phase left it to do is done before the next phase is measured."""
    mark = audit.mark()

    def calm() -> bool:
        nonlocal mark
        time.sleep(window)
        end = audit.mark()
        count = len(audit.requests(mark, end))
        mark = end
        return count <= most

    try:
        wait_for(calm, timeout, f"{audit.agents[0]} to settle", interval=0)
    except AssertionError as e:
        print(f"warning: {e}; measuring anyway", flush=True)


def replace_crd(kubectl: Kubectl, obj: dict[str, Any]) -> None:
    """Replace `tfjobs.kubeflow.org` in place (its TFJobs stay), and wait until the API server
    serves the new schema: a dry-run create with a field of ours only, in strict field
    validation, fails under Kubeflow's schema."""
    kubectl("replace", "-f", "-", input=json.dumps(obj))
    kubectl.wait_established(peer.CRD_NAME)
    probe = tfjob(name="schema-probe", run_policy={"nodeLostTimeoutSeconds": 0})
    probe["apiVersion"] = f"{KUBEFLOW_GROUP}/{VERSION}"
    probe["metadata"].pop("uid")

    def ours() -> bool:
        run = kubectl.run(
            "create",
            "--dry-run=server",
            "--validate=strict",
            "-f",
            "-",
            input=json.dumps(probe),
            check=False,
        )
        return run.returncode == 0

    wait_for(ours, 60, "the operator's schema for tfjobs.kubeflow.org", interval=0.5)


def chart_limit() -> tuple[str, str]:
    """The client limit the chart installs the operator with (`kubeApi`): qps, burst."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())["kubeApi"]
    return str(values["qps"]), str(values["burst"])


def operator_limit(args: argparse.Namespace) -> list[str]:
    """Our operator's client limit: the chart's values (--shipped), or --kube-api-qps."""
    if args.shipped:
        qps, burst = chart_limit()
        return [f"--kube-api-qps={qps}", f"--kube-api-burst={burst}"]
    if args.operator_src:
        return []  # an older checkout has no rate limit to turn off
    return [f"--kube-api-qps={args.kube_api_qps}"]


def peer_limit(args: argparse.Namespace) -> list[str]:
    """training-operator's client limit: its own defaults (--shipped), or none unless
    --kube-api-qps asks for one. Its limit is a token bucket, where 0 would block, so "none" is
    one that never binds."""
    if args.shipped:
        return []
    unlimited = args.kube_api_qps in ("0", "")
    qps = "1000000" if unlimited else args.kube_api_qps
    burst = "1000000" if unlimited else str(max(30, int(float(qps) * 1.5)))
    return [f"--kube-api-qps={qps}", f"--kube-api-burst={burst}"]


def controller_manager_limit(args: argparse.Namespace) -> list[str]:
    """kube-controller-manager's client limit: its default (20/s, 30 at once) unless
    --kcm-api-qps raises it (its burst then 1.5 times that); and its StatefulSet workers."""
    syncs = (
        []
        if args.kcm_statefulset_syncs is None
        else [f"--concurrent-statefulset-syncs={args.kcm_statefulset_syncs}"]
    )
    if args.kcm_api_qps is None:
        return syncs
    qps = args.kcm_api_qps
    return [f"--kube-api-qps={qps:g}", f"--kube-api-burst={max(30, int(qps * 1.5))}", *syncs]


def limits(args: argparse.Namespace) -> str:
    """The client limits of a comparison, for its title."""
    kcm = (
        "kube-controller-manager at its default 20/s"
        if args.kcm_api_qps is None
        else f"kube-controller-manager --kube-api-qps={args.kcm_api_qps:g}"
    )
    if args.kcm_statefulset_syncs is not None:
        kcm += f", --concurrent-statefulset-syncs={args.kcm_statefulset_syncs}"
    if args.shipped:
        qps, burst = chart_limit()
        return (
            f"both controllers as shipped: ours at the chart's {qps}/s (burst {burst}), "
            f"training-operator at its own defaults; {kcm}"
        )
    if args.kube_api_qps in ("0", ""):
        return f"no client-side limit on either controller; {kcm}"
    return f"both controllers at client QPS {args.kube_api_qps}; {kcm}"


def compare(
    plane: ControlPlane,
    kubectl: Kubectl,
    api: kubernetes.client.ApiClient,
    work: Path,
    args: argparse.Namespace,
    operator_args: list[str],
    operator_env: dict[str, str],
) -> dict[str, dict[str, Any]]:
    """Step 6: Kubeflow's training-operator on its own CRD, then ours on ours."""
    theirs = peer.PeerProcess(
        kubectl,
        work / "training-operator.log",
        "peer",
        [*peer_limit(args), f"--controller-threads={args.peer_threads}"],
    )
    ours = OperatorProcess(
        plane.kubeconfig,
        work / "operator-kubeflow.log",
        [*operator_args, f"--api-group={KUBEFLOW_GROUP}", "--namespace=ours"],
    )
    ours.env.update(operator_env)

    def start_theirs() -> int:
        theirs.start()
        assert theirs.proc is not None
        return theirs.proc.pid

    def start_ours() -> int:
        ours.start()
        assert ours.proc is not None
        return ours.proc.pid

    for ns in ("peer", "ours"):
        kubectl("create", "namespace", ns)
    peer.install_crd(kubectl)
    results = {
        "peer": through(
            Controller(
                "training-operator",
                "peer",
                (peer.USER_AGENT,),
                start_theirs,
                theirs.stop,
                worker_done_phase="Succeeded",
            ),
            api,
            plane,
            args.jobs,
        )
    }
    # Ours does not run on Kubeflow's CRD as it is: that schema prunes the status fields ours
    # writes beyond Kubeflow's (observedGeneration, activeReplicas, restarts, the exit ledger),
    # so each reconcile would write them again and, missing its observedGeneration, look for
    # another controller's pods and Services: twice the requests, and no restart accounting.
    replace_crd(kubectl, crd(KUBEFLOW_GROUP))
    results["ours"] = through(
        Controller(
            "tfjob-operator",
            "ours",
            OPERATOR_AGENTS,
            start_ours,
            ours.stop,
            worker_done_phase="Running",
        ),
        api,
        plane,
        args.jobs,
    )
    return results


def table3(title: str, heads: tuple[str, str], rows: list[tuple[str, str, str]]) -> None:
    width = max(len(k) for k, _, _ in rows)
    left = max(len(heads[0]), *(len(a) for _, a, _ in rows))
    print(f"\n{title}")
    print(f"{'measure'.ljust(width)} | {heads[0].ljust(left)} | {heads[1]}")
    print(f"{'-' * width}-|-{'-' * left}-|-{'-' * max(len(heads[1]), 24)}")
    for k, a, b in rows:
        print(f"{k.ljust(width)} | {a.ljust(left)} | {b}")


def writes_per_job(events: list[dict[str, Any]], ns: str, n: int) -> str:
    mine = [e for e in events if (e.get("objectRef") or {}).get("namespace") == ns]
    writes = sum(1 for e in mine if e["verb"] in {"create", "patch", "update", "delete"})
    return f"{len(mine) / n:.2f} ({writes / n:.2f})"


def comparison_tables(results: dict[str, dict[str, Any]], n: int, limit: str) -> None:
    ours, theirs = results["ours"], results["peer"]

    def both(fmt: Callable[[dict[str, Any]], str]) -> tuple[str, str]:
        return fmt(ours), fmt(theirs)

    def cpu(who: str) -> Callable[[dict[str, Any]], str]:
        return lambda r: f"{r['cpu_pods'][who]:.1f} / {r['cpu'][who]:.1f} s"

    rows = [
        ("CRD tfjobs.kubeflow.org", "ours (tfjob_operator.api.crd)", f"Kubeflow's v{VERSION_PEER}"),
        ("pods made by", "kube-controller-manager (StatefulSets)", "the controller (bare pods)"),
        (f"all {n} jobs' {n * PODS_PER_JOB} pods exist", *both(lambda r: f"{r['pods']:.1f} s")),
        ("create -> pods p50", *both(lambda r: f"{statistics.median(r['latencies']):.2f} s")),
        ("create -> pods p99", *both(lambda r: f"{pct(r['latencies'], 99):.2f} s")),
        (
            "pods Running -> Succeeded, cleaned, quiet",
            *both(lambda r: f"{r['lifecycle']:.1f} s"),
        ),
        ("whole phase (wall)", *both(lambda r: f"{r['wall']:.1f} s")),
        ("controller CPU: create -> pods / whole", *both(cpu("controller"))),
        (
            "controller RSS: start / pods / end (peak)",
            *both(lambda r: "{:.0f} / {:.0f} / {:.0f} ({:.0f}) MiB".format(*r["rss"])),
        ),
        (
            "controller requests per job (writes)",
            writes_per_job(ours["requests"], "ours", n),
            writes_per_job(theirs["requests"], "peer", n),
        ),
        (
            "kube-controller-manager requests per job",
            writes_per_job(ours["kcm_requests"], "ours", n),
            writes_per_job(theirs["kcm_requests"], "peer", n),
        ),
        ("kube-apiserver CPU: create -> pods / whole", *both(cpu("kube-apiserver"))),
        (
            "kube-controller-manager CPU: create -> pods / whole",
            *both(cpu("kube-controller-manager")),
        ),
        ("etcd CPU: create -> pods / whole", *both(cpu("etcd"))),
        (
            "controller + apiserver + controller-manager + etcd CPU",
            *both(lambda r: f"{sum(r['cpu'].values()):.1f} s"),
        ),
    ]
    table3(
        f"ours beside Kubeflow training-operator v{VERSION_PEER}: {n} TFJobs (PS=1, Worker=2; "
        f"kubeflow.org/v1, cleanPodPolicy Running) created at once, one controller after the "
        f"other ({limit})",
        ("ours", "training-operator"),
        rows,
    )
    per_job_table(ours["requests"], {"ours": n}, "from create to Succeeded", "Ours (kubeflow.org)")
    per_job_table(theirs["requests"], {"peer": n}, "from create to Succeeded", "training-operator")


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
    parser.add_argument(
        "--no-peer",
        action="store_true",
        help="skip step 6, the same jobs through Kubeflow's training-operator and through ours "
        "on kubeflow.org",
    )
    parser.add_argument(
        "--peer-threads",
        type=int,
        default=1,
        help="training-operator's --controller-threads (default 1, its own default and what "
        "its manifests run)",
    )
    parser.add_argument(
        "--comparison-only",
        action="store_true",
        help="run step 6 alone: the same jobs through training-operator and through ours",
    )
    parser.add_argument(
        "--shipped",
        action="store_true",
        help="both controllers with the client limits they ship with: ours the chart's values, "
        "training-operator its own defaults (instead of --kube-api-qps)",
    )
    parser.add_argument(
        "--kcm-api-qps",
        type=float,
        help="kube-controller-manager's --kube-api-qps (its burst 1.5 times that); default: its "
        "own, 20, which its StatefulSet controller shares with every other controller in it",
    )
    parser.add_argument(
        "--kcm-statefulset-syncs",
        type=int,
        help="kube-controller-manager's --concurrent-statefulset-syncs (default: its own, 5): "
        "how many StatefulSets it makes pods for at once",
    )
    add_qps_argument(parser)
    args = parser.parse_args()
    operator_args = ["--log-level=info", *operator_limit(args)]
    operator_env = {}
    if args.operator_src:
        operator_env["PYTHONPATH"] = str(args.operator_src.resolve())
    with audited_plane("tfjob-scale-", controller_manager_limit(args)) as (
        work,
        plane,
        kubectl,
        api,
    ):
        if args.comparison_only:
            peers = compare(plane, kubectl, api, work, args, operator_args, operator_env)
            comparison_tables(peers, args.jobs, limits(args))
            return
        core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
        audit = Audit(plane.audit_log)
        operator = OperatorProcess(plane.kubeconfig, work / "operator.log", operator_args)
        operator.env.update(operator_env)
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
        peers = None
        if not args.no_peer:
            # Before the bare loop: the controller-manager would make the pods of its
            # StatefulSets (and their Services' EndpointSlices) for minutes, inside the phases.
            peers = compare(plane, kubectl, api, work, args, operator_args, operator_env)
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
        if peers:
            comparison_tables(peers, args.jobs, limits(args))
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
    if peers:
        comparison_tables(peers, args.jobs, limits(args))


if __name__ == "__main__":
    main()
