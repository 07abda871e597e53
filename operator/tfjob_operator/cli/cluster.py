"""`tfjob submit | logs | get | tensorboard | delete`: TFJobs on a cluster, with the look of
`tfjob run`: replica-prefixed logs, the same summary, an exit code that says how it went.

It connects as kubectl does: $KUBECONFIG (or ~/.kube/config) with its current context, or
`--context`; in a pod, the service account. Every failure is one line on stderr and exit 1
(2 for a file or spec that cannot be used).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import kubernetes
import urllib3
import yaml

from tfjob_operator.api.spec import GROUP, GROUPS, KIND, PLURAL, VERSION, ReplicaType
from tfjob_operator.cli.output import line_prefix, summary_lines
from tfjob_operator.rules import naming
from tfjob_operator.rules import status as st
from tfjob_operator.rules import tensorboard as tb
from tfjob_operator.rules.lifecycle import JobView
from tfjob_protocol.result import Result, parse_last

POLL_SECONDS = 0.5
TENSORBOARD_WAIT_SECONDS = 120  # for a TensorBoard pod that is starting
EXIT_FAILED, EXIT_USAGE = 1, 2


class CliError(Exception):
    """One line for the user; the command exits with `code`."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Cluster:
    """API handles and the namespace, chosen the way kubectl chooses them."""

    core: kubernetes.client.CoreV1Api
    custom: kubernetes.client.CustomObjectsApi
    namespace: str
    server: str
    group: str = GROUP  # the TFJobs' API group, as the operator serves it

    @classmethod
    def connect(cls, namespace: str | None, context: str | None, group: str = GROUP) -> Cluster:
        paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
        if paths and not any(Path(p).exists() for p in paths):
            raise CliError(f"no cluster: KUBECONFIG names no file ({os.environ['KUBECONFIG']})")
        try:
            if paths or Path("~/.kube/config").expanduser().exists():
                client = kubernetes.config.new_client_from_config(context=context)
                _, active = kubernetes.config.list_kube_config_contexts()
                if context:
                    contexts, _ = kubernetes.config.list_kube_config_contexts()
                    active = next((c for c in contexts if c["name"] == context), active)
                default_ns = (active.get("context") or {}).get("namespace") or "default"
            elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                kubernetes.config.load_incluster_config()
                client = kubernetes.client.ApiClient()
                default_ns = (
                    Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                    .read_text()
                    .strip()
                )
            else:
                raise CliError("no cluster: set KUBECONFIG or create ~/.kube/config")
        except (kubernetes.config.ConfigException, OSError, ValueError) as e:
            raise CliError(f"cannot read the kubeconfig: {e}") from None
        return cls(
            kubernetes.client.CoreV1Api(client),
            kubernetes.client.CustomObjectsApi(client),
            namespace or default_ns,
            client.configuration.host,
            group,
        )

    def call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """An API call whose failures become one clear line."""
        try:
            return fn(*args, _request_timeout=kwargs.pop("_request_timeout", 30), **kwargs)
        except kubernetes.client.ApiException as e:
            raise self._refusal(what, e) from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            reason = getattr(e, "reason", None) or e
            raise CliError(f"cannot reach the cluster at {self.server}: {reason}") from None

    def _refusal(self, what: str, e: kubernetes.client.ApiException) -> CliError:
        try:
            body = json.loads(e.body or "{}")
        except ValueError:
            body = {}
        details = body.get("details") or {}
        if e.status == 404 and not details.get("name"):
            return CliError(
                f"the {KIND} CRD ({PLURAL}.{self.group}) is not installed on this cluster; "
                f"install it: kubectl apply -f {_crd_manifest(self.group)} (or helm install the "
                "chart)"
            )
        if e.status == 404:
            return CliError(f"{KIND} {self.namespace}/{details['name']} not found")
        return CliError(f"cannot {what}: {body.get('message') or e.reason}")

    def job(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.call(
            f"read {KIND} {name}",
            self.custom.get_namespaced_custom_object,
            self.group,
            VERSION,
            self.namespace,
            PLURAL,
            name,
        )
        return found

    def pods(self, job: str) -> list[Any]:
        """The job's replica pods (not its TensorBoard), in replica order."""
        items = self.call(
            "list pods",
            self.core.list_namespaced_pod,
            self.namespace,
            label_selector=f"{naming.LABEL_JOB_NAME}={job},{naming.LABEL_REPLICA_TYPE}",
        ).items
        return sorted(items, key=lambda p: replica_key(p.metadata.name, job))


def replica_of(pod: str, job: str) -> str:
    """`worker-1` for the pod `mnist-worker-1` of the job `mnist`."""
    return pod.removeprefix(f"{job}-")


def replica_key(pod: str, job: str) -> tuple[int, int, str]:
    rt, _, index = replica_of(pod, job).rpartition("-")
    order = [t.task_type for t in ReplicaType]
    return (order.index(rt) if rt in order else len(order), int(index or 0), pod)


def age(created: Any) -> str:
    """kubectl's AGE: 45s, 12m, 3h, 2d."""
    if isinstance(created, str):
        created = st.parse_timestamp(created)
    if created is None:
        return "-"
    seconds = max(0, int((datetime.now(UTC) - created).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def job_row(job: dict[str, Any], namespace: bool) -> list[str]:
    status = job.get("status") or {}
    replicas = sum(
        int(rs.get("replicas", 1))
        for rs in ((job.get("spec") or {}).get("tfReplicaSpecs") or {}).values()
        if isinstance(rs, dict)
    )
    meta = job["metadata"]
    row = [
        meta["name"],
        st.state(status) or "-",
        status.get("activeReplicas") or f"0/{replicas}",
        str(status.get("restarts", 0)),
        age(meta.get("creationTimestamp")),
    ]
    return [meta["namespace"], *row] if namespace else row


# -- the commands ------------------------------------------------------------------------


def get(cluster: Cluster, name: str | None, all_namespaces: bool, out: TextIO) -> int:
    if name:
        jobs = [cluster.job(name)]
    elif all_namespaces:
        jobs = cluster.call(
            f"list {PLURAL}",
            cluster.custom.list_cluster_custom_object,
            cluster.group,
            VERSION,
            PLURAL,
        )["items"]
    else:
        jobs = cluster.call(
            f"list {PLURAL}",
            cluster.custom.list_namespaced_custom_object,
            cluster.group,
            VERSION,
            cluster.namespace,
            PLURAL,
        )["items"]
    if not jobs:
        where = "any namespace" if all_namespaces else f"namespace {cluster.namespace}"
        print(f"No TFJobs in {where}.", file=out)
        return 0
    header = ["NAME", "STATE", "REPLICAS", "RESTARTS", "AGE"]
    rows = [["NAMESPACE", *header] if all_namespaces else header]
    rows += [job_row(j, all_namespaces) for j in sorted(jobs, key=_ns_name)]
    print(table(rows), file=out)
    return 0


def _ns_name(job: dict[str, Any]) -> tuple[str, str]:
    return job["metadata"]["namespace"], job["metadata"]["name"]


def delete(cluster: Cluster, name: str, out: TextIO) -> int:
    cluster.call(
        f"delete {KIND} {name}",
        cluster.custom.delete_namespaced_custom_object,
        cluster.group,
        VERSION,
        cluster.namespace,
        PLURAL,
        name,
        propagation_policy="Background",
    )
    print(
        f"{PLURAL}.{cluster.group}/{name} deleted (its pods, Services and TensorBoard go with it)",
        file=out,
    )
    return 0


def _crd_manifest(group: str) -> str:
    return "manifests/kubeflow/crd.yaml" if group != GROUP else "manifests/crd.yaml"


def read_manifest(path: Path) -> dict[str, Any]:
    """A TFJob manifest, checked with the operator's own rules before it is sent."""
    try:
        body = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise CliError(f"cannot read {path}: {e}", EXIT_USAGE) from None
    versions = [f"{group}/{VERSION}" for group in GROUPS]
    if (
        not isinstance(body, dict)
        or body.get("kind") != KIND
        or body.get("apiVersion") not in versions
    ):
        raise CliError(f"{path} is not a {KIND} ({' or '.join(versions)})", EXIT_USAGE)
    view = JobView.from_body({**body, "metadata": {**(body.get("metadata") or {}), "uid": "-"}})
    if view.spec is None:
        raise CliError("invalid TFJob: " + "; ".join(view.problems), EXIT_USAGE)
    return body


def submit(cluster: Cluster, path: Path, follow: bool, out: TextIO) -> int:
    body = read_manifest(path)
    meta = body.setdefault("metadata", {})
    namespace = meta.get("namespace") or cluster.namespace
    cluster.namespace = meta["namespace"] = namespace
    cluster.group = body["apiVersion"].split("/")[0]  # the manifest's group is the one meant
    name = meta.get("name", "")
    try:
        cluster.call(
            f"create {KIND} {name}",
            cluster.custom.create_namespaced_custom_object,
            cluster.group,
            VERSION,
            namespace,
            PLURAL,
            body,
        )
    except CliError as e:
        if "already exists" in str(e):
            raise CliError(
                f"{KIND} {namespace}/{name} already exists; tfjob delete {name} -n {namespace} "
                "first, or pick another name"
            ) from None
        raise
    print(f"{PLURAL}.{cluster.group}/{name} created in namespace {namespace}", file=out, flush=True)
    if not follow:
        return 0
    return Follower(cluster, name, out, colour=out.isatty()).run()


def logs(cluster: Cluster, name: str, replica: str | None, follow: bool, out: TextIO) -> int:
    cluster.job(name)  # not found: one clear line
    pods = cluster.pods(name)
    if replica is not None:
        pods = [p for p in pods if replica_of(p.metadata.name, name) == replica]
        if not pods:
            known = ", ".join(replica_of(p.metadata.name, name) for p in cluster.pods(name))
            raise CliError(
                f"{KIND} {name} has no running replica {replica} (has: {known or 'none'})"
            )
    if not pods:
        raise CliError(f"{KIND} {name} has no pods now (a finished job's pods are scaled down)")
    printer = Printer(out, colour=out.isatty())
    streams = [
        LogStream(cluster, p.metadata.name, replica_of(p.metadata.name, name), i, printer)
        for i, p in enumerate(pods)
    ]
    if not follow:
        for s in streams:
            s.dump()
        return 0
    threads = [threading.Thread(target=s.follow, daemon=True) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


def tensorboard(cluster: Cluster, name: str, port: int, out: TextIO) -> int:
    job = cluster.job(name)
    board = (job.get("status") or {}).get("tensorboard")
    if not board:
        raise CliError(
            f"{KIND} {name} has no TensorBoard: add `tensorboard: {{}}` to its spec (with a "
            "checkpoint volume) and re-create it"
        )
    pod = _tensorboard_pod(cluster, name)
    forward = PortForward(cluster, pod, tb.PORT, port)
    print(
        f"TensorBoard of {cluster.namespace}/{name}: http://127.0.0.1:{forward.port}/ "
        f"(through pod {pod}; Ctrl-C stops)",
        file=out,
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        forward.serve()
    return 0


def _tensorboard_pod(cluster: Cluster, job: str) -> str:
    """A running pod of the job's TensorBoard, waiting for one that is starting."""
    selector = f"{naming.LABEL_JOB_NAME}={job},{naming.LABEL_COMPONENT}={tb.COMPONENT}"
    deadline = time.monotonic() + TENSORBOARD_WAIT_SECONDS
    while True:
        pods = cluster.call(
            "list pods",
            cluster.core.list_namespaced_pod,
            cluster.namespace,
            label_selector=selector,
        ).items
        running: list[str] = [p.metadata.name for p in pods if p.status.phase == "Running"]
        if running:
            return running[0]
        if time.monotonic() > deadline:
            raise CliError(
                f"the TensorBoard of {job} has no running pod after {TENSORBOARD_WAIT_SECONDS}s"
            )
        time.sleep(1)


# -- streaming ---------------------------------------------------------------------------


@dataclass
class Printer:
    """Prefixed lines from several threads, whole lines only."""

    out: TextIO
    colour: bool
    lock: threading.Lock = field(default_factory=threading.Lock)

    def line(self, prefix: str, text: str) -> None:
        with self.lock:
            self.out.write(prefix + text + "\n")
            self.out.flush()


@dataclass
class LogStream:
    """One pod's log, prefixed with its replica; remembers the trainer's result line."""

    cluster: Cluster
    pod: str
    replica: str
    index: int
    printer: Printer
    result: Result | None = None

    @property
    def prefix(self) -> str:
        return line_prefix(self.replica, self.index, self.printer.colour)

    def _emit(self, text: str) -> None:
        if (r := parse_last(text)) is not None:
            self.result = r
        self.printer.line(self.prefix, text)

    def dump(self) -> None:
        text = self.cluster.call(
            f"read the log of {self.pod}",
            self.cluster.core.read_namespaced_pod_log,
            self.pod,
            self.cluster.namespace,
        )
        for line in text.splitlines():
            self._emit(line)

    def follow(self) -> None:
        """Stream the log until the container ends (or its pod goes)."""
        with contextlib.suppress(CliError, urllib3.exceptions.HTTPError, OSError):
            response = self.cluster.call(
                f"follow the log of {self.pod}",
                self.cluster.core.read_namespaced_pod_log,
                self.pod,
                self.cluster.namespace,
                follow=True,
                _preload_content=False,
                _request_timeout=None,
            )
            for raw in _lines(response):
                self._emit(raw)


def _lines(response: Any) -> Iterator[str]:
    pending = b""
    for chunk in response.stream(4096):
        pending += chunk
        *whole, pending = pending.split(b"\n")
        for line in whole:
            yield line.decode(errors="replace")
    if pending:
        yield pending.decode(errors="replace")


class Follower:
    """`submit --follow`: every replica's log as its containers run (restarts included), the
    job's transitions as they happen, then the summary and an exit code from the result."""

    def __init__(self, cluster: Cluster, name: str, out: TextIO, colour: bool) -> None:
        self.cluster, self.name = cluster, name
        self.printer = Printer(out, colour)
        self.streams: dict[tuple[str, int], LogStream] = {}  # (pod uid, restart count)
        self.order: dict[str, int] = {}
        self.seen: set[tuple[str, str]] = set()
        self.started = time.monotonic()

    def run(self) -> int:
        status: dict[str, Any] = {}
        while True:
            # Pods first: a job that fails within a second still shows why, from the log of
            # the container that ended it, before its pods are scaled down.
            self._attach()
            job = self.cluster.job(self.name)
            status = job.get("status") or {}
            self._transitions(status)
            if st.is_finished(status):
                break
            time.sleep(POLL_SECONDS)
        # The final lines (the result) of containers that just ended.
        deadline = time.monotonic() + 10
        for t in [s for s in threading.enumerate() if s.name.startswith("tfjob-log-")]:
            t.join(max(0.0, deadline - time.monotonic()))
        board = (status.get("tensorboard") or {}).get("portForward")
        self.printer.line("", "")
        for line in summary_lines(
            status,
            time.monotonic() - self.started,
            [s.result for s in self.streams.values()],
            checkpoints="on the job's checkpoint volume",
            tensorboard=f"tfjob tensorboard {self.name}" if board else "-",
        ):
            self.printer.line("", line)
        return 0 if st.is_true(status, st.Cond.SUCCEEDED) else EXIT_FAILED

    def _transitions(self, status: dict[str, Any]) -> None:
        """Each condition once, in the order they happened: one that is False now (Running,
        after success) still happened, even if it came and went between two looks."""
        conditions = sorted(
            status.get("conditions") or [], key=lambda c: c.get("lastTransitionTime") or ""
        )
        for c in conditions:
            key = (c["type"], c.get("reason", ""))
            if key in self.seen:
                continue
            self.seen.add(key)
            self.printer.line("[tfjob] ", f"{c.get('reason')}: {c.get('message', '')}")

    def _attach(self) -> None:
        """Follow each container run that has started and is not followed yet."""
        for pod in self.cluster.pods(self.name):
            statuses = pod.status.container_statuses or []
            run = next(
                (s for s in statuses if s.name == "tensorflow"), statuses[0] if statuses else None
            )
            if run is None or not (run.state.running or run.state.terminated):
                continue
            key = (pod.metadata.uid, run.restart_count)
            if key in self.streams:
                continue
            replica = replica_of(pod.metadata.name, self.name)
            index = self.order.setdefault(replica, len(self.order))
            stream = LogStream(self.cluster, pod.metadata.name, replica, index, self.printer)
            self.streams[key] = stream
            threading.Thread(target=stream.follow, daemon=True, name=f"tfjob-log-{replica}").start()


class PortForward:
    """A local port that reaches one pod's port through the API server, one websocket per
    connection (what `kubectl port-forward` does)."""

    def __init__(self, cluster: Cluster, pod: str, remote: int, local: int) -> None:
        self.cluster, self.pod, self.remote = cluster, pod, remote
        self.server = socket.create_server(("127.0.0.1", local))
        self.port = self.server.getsockname()[1]

    def serve(self) -> None:
        while True:
            conn, _ = self.server.accept()
            threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    def _relay(self, conn: socket.socket) -> None:
        from kubernetes.stream import portforward

        try:
            forward = portforward(
                self.cluster.core.connect_get_namespaced_pod_portforward,
                self.pod,
                self.cluster.namespace,
                ports=str(self.remote),
            )
            remote = forward.socket(self.remote)
        except Exception as e:  # the pod went: this connection fails, the next may not
            print(f"tfjob: port-forward to {self.pod} failed: {e}", file=sys.stderr, flush=True)
            conn.close()
            return
        done = threading.Event()

        def pump(src: socket.socket, dst: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := src.recv(65536):
                    dst.sendall(data)
            done.set()

        threading.Thread(target=pump, args=(conn, remote), daemon=True).start()
        threading.Thread(target=pump, args=(remote, conn), daemon=True).start()
        done.wait()
        for s in (conn, remote):
            with contextlib.suppress(OSError):
                s.close()
        with contextlib.suppress(Exception):
            forward.close()
