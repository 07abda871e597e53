"""What `operator_scale.py` runs: a control plane whose audit log keeps every request, the
operator through steps 1 to 4, the jobs' pods reported as a kubelet would, and step 6's two
controllers one after the other.

The phases only run and sample; what they found is returned for `scale_report.py` to print."""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
from create_jobs import REPLICAS, create_at_once, rss_mb
from scale_limits import peer_limit
from scale_measure import (
    OPERATOR_AGENTS,
    PODS_PER_JOB,
    Audit,
    PodWatch,
    Sample,
    cpu_of,
    settle,
    wait_quiet,
)

from tfjob_operator.api.crd import crd
from tfjob_operator.api.spec import GROUP, KUBEFLOW_GROUP, PLURAL, VERSION
from tfjob_operator.rules import status as st
from tfjob_testbed.addons import peer
from tfjob_testbed.controlplane.audit import AUDIT_EVERYTHING
from tfjob_testbed.controlplane.binaries import ensure_binaries
from tfjob_testbed.controlplane.plane import ControlPlane
from tfjob_testbed.core.jobs import container_status, tfjob
from tfjob_testbed.core.kube import Kubectl, wait_for
from tfjob_testbed.core.paths import scratch_dir
from tfjob_testbed.core.tools import ensure_tools
from tfjob_testbed.project.operator import OperatorProcess
from tfjob_testbed.sandbox import install_crd


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


@dataclass
class Finished:
    """Steps 3 and 4: every job run to Succeeded, then the operator idle among them."""

    lifetime: dict[str, float]  # the operator's Sample from pods Running to quiet
    idled: dict[str, float]  # its Sample over the idle window
    idle_requests: list[dict[str, Any]]
    end: int  # the audit log's mark where the jobs were done and the idle window began


@dataclass
class OperatorRun:
    """Steps 1 to 4 through the operator: what the tables of `scale_report.py` print."""

    namespaces: dict[str, int]  # the jobs created in each namespace
    burst: dict[str, Any]  # create_at_once's times of the burst
    scale: dict[str, Any]  # and of the `--jobs` jobs
    empty: dict[str, float]  # the operator's Sample with no job
    created: dict[str, float]  # its Sample while the `--jobs` jobs were created
    requests: list[dict[str, Any]]  # its requests from the first create to the jobs' end
    finished: Finished | None  # None with --no-lifecycle


def operator_steps(
    plane: ControlPlane,
    kubectl: Kubectl,
    api: kubernetes.client.ApiClient,
    work: Path,
    args: argparse.Namespace,
    operator_args: list[str],
    operator_env: dict[str, str],
) -> OperatorRun:
    """Steps 1 to 4 with the operator as its own process: the burst and the `--jobs` jobs
    created at once, then (unless --no-lifecycle) their lifecycle and the idle window."""
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
        finished = None
        if not args.no_lifecycle:
            finished = lifecycle(api, audit, pid, namespaces, begin, args.idle)
        end = audit.mark() if finished is None else finished.end
        requests = audit.requests(begin, end)
        return OperatorRun(namespaces, burst, scale, empty, created, requests, finished)
    finally:
        operator.stop()


def lifecycle(
    api: kubernetes.client.ApiClient,
    audit: Audit,
    pid: int,
    namespaces: dict[str, int],
    begin: int,
    idle_seconds: float,
) -> Finished:
    """Steps 3 and 4: every pod Running, worker 0 exiting 0, every job Succeeded and the
    operator quiet; then `idle_seconds` among the finished jobs."""
    core, custom = kubernetes.client.CoreV1Api(api), kubernetes.client.CustomObjectsApi(api)
    running = Sample(pid)
    report_pods(core, namespaces)
    wait_states(custom, namespaces, "Running", 1800)
    report_pods(core, namespaces, state="terminated", exit_code=0, only="worker-0")
    wait_states(custom, namespaces, "Succeeded", 1800)
    wait_quiet(audit, begin, 10.0, 600)
    lifetime = running.end()
    end_of_life = audit.mark()
    idle = Sample(pid)
    time.sleep(idle_seconds)  # the measured idle window itself
    idled = idle.end()
    return Finished(lifetime, idled, audit.requests(end_of_life), end_of_life)


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
