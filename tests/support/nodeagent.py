"""A node agent for the local control plane: it runs the pods of one namespace as processes.

There is no kubelet or container runtime here, so this stands in for both. Every pod gets a
network namespace on a host bridge, an /etc/hosts that resolves the pod DNS names of its job
(the cluster DNS a real node would use), the `apps.kubernetes.io/pod-index` label, the container
env expanded as the kubelet expands it, and its container command run as a process whose status
is written back to the pod. Exited containers restart (StatefulSet pods are restartPolicy
Always); deleted pods are killed. Needs root (`ip netns`, veth, bridges).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes

from tfjob_operator import naming

BRIDGE = "tfjbr0"
SUBNET_PREFIX = "10.244"
BRIDGE_ADDRESS = f"{SUBNET_PREFIX}.0.1/16"
NETNS_DIR = Path("/etc/netns")
CLUSTER_DOMAIN = "cluster.local"

_REFERENCE = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")
_FIELD_LABEL = re.compile(r"^metadata\.labels\['(.+)'\]$")


def _ip(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def network_namespaces_work() -> str | None:
    """None when this process can make network namespaces; otherwise why not."""
    if os.geteuid() != 0:
        return "needs root for network namespaces (ip netns, veth, bridges)"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "needs the ip (iproute2) and unshare (util-linux) commands"
    probe = f"tfj-probe-{os.getpid()}"
    made = _ip(["netns", "add", probe], check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    _ip(["netns", "del", probe], check=False)
    return None


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: defined names are replaced, `$$` is a literal `$`,
    and references to undefined names stay as they are."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _REFERENCE.sub(sub, value)


def field_ref(pod: dict[str, Any], path: str) -> str:
    """The downward API's `fieldRef.fieldPath` for the fields the operator uses."""
    meta = pod["metadata"]
    if path == "metadata.name":
        return meta["name"]
    if path == "metadata.namespace":
        return meta["namespace"]
    m = _FIELD_LABEL.match(path)
    if m:
        return (meta.get("labels") or {}).get(m.group(1), "")
    m = re.match(r"^metadata\.annotations\['(.+)'\]$", path)
    if m:
        return (meta.get("annotations") or {}).get(m.group(1), "")
    if path == "status.podIP":
        return (pod.get("status") or {}).get("podIP", "")
    raise ValueError(f"unsupported fieldRef {path!r}")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _exit_code(returncode: int) -> int:
    """A container's exit code: killed by signal N reads 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass
class _Running:
    """One pod this agent runs."""

    name: str
    uid: str
    netns: str
    veth: str
    ip: str
    container: str
    image: str
    argv: list[str]
    env: dict[str, str]
    hosts: str = ""
    restarts: int = 0
    proc: subprocess.Popen[bytes] | None = None
    started_at: str = ""
    last_terminated: dict[str, Any] | None = None  # the latest exit
    prev_terminated: dict[str, Any] | None = None  # the one before it
    exited_at: float | None = None  # monotonic, while waiting to restart
    history: list[int] = field(default_factory=list)  # exit codes, oldest first


class NodeAgent:
    """Runs the pods of `namespace` as local processes, each in a network namespace."""

    def __init__(
        self,
        core: kubernetes.client.CoreV1Api,
        namespace: str,
        workdir: Path,
        *,
        interval: float = 0.3,
        backoff: float = 1.0,
    ) -> None:
        self.core = core
        self.apps = kubernetes.client.AppsV1Api(core.api_client)
        self.namespace = namespace
        self.workdir = Path(workdir)
        self.interval, self.backoff = interval, backoff
        self.pods: dict[str, _Running] = {}
        self.errors: list[str] = []
        self.exits: dict[str, list[int]] = {}  # every container exit by pod, kept after deletion
        self._ips: dict[str, str] = {}
        self._made_netns_dir = False
        self._bridge = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ---- lifecycle ----------------------------------------------------------------------

    def __enter__(self) -> NodeAgent:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        (self.workdir / "pvc").mkdir(parents=True, exist_ok=True)
        if not NETNS_DIR.exists():
            NETNS_DIR.mkdir(parents=True)
            self._made_netns_dir = True
        if _ip(["link", "show", BRIDGE], check=False).returncode != 0:
            _ip(["link", "add", BRIDGE, "type", "bridge"])
        self._bridge = True
        _ip(["addr", "replace", BRIDGE_ADDRESS, "dev", BRIDGE])
        _ip(["link", "set", BRIDGE, "up"])
        self._thread = threading.Thread(target=self._loop, name="node-agent", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Kill every process and remove every namespace, veth, hosts dir and the bridge."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        with self._lock:
            for run in list(self.pods.values()):
                self._teardown(run)
            self.pods.clear()
        if self._bridge:
            _ip(["link", "del", BRIDGE], check=False)
            self._bridge = False
        if self._made_netns_dir:
            with contextlib.suppress(OSError):
                NETNS_DIR.rmdir()

    # ---- for tests ----------------------------------------------------------------------

    def kill(self, pod: str) -> None:
        """SIGKILL the pod's process group, as a crash would."""
        with self._lock:
            run = self.pods.get(pod)
            if run is None or run.proc is None or run.proc.poll() is not None:
                raise AssertionError(f"pod {pod} has no running process")
            os.killpg(run.proc.pid, signal.SIGKILL)

    def log_path(self, pod: str, restart: int | None = None) -> Path:
        if restart is None:
            run = self.pods.get(pod)
            restart = run.restarts if run else 0
        return self.workdir / "logs" / f"{pod}.{restart}.log"

    def log(self, pod: str, restart: int | None = None) -> str:
        """The output of the pod's container (its current run unless `restart` says which)."""
        path = self.log_path(pod, restart)
        return path.read_text(errors="replace") if path.exists() else ""

    def pvc_dir(self, claim: str) -> Path:
        return self.workdir / "pvc" / claim

    # ---- the loop -----------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                with self._lock:
                    self._sync()
            except Exception as e:  # keep going: a test reads `errors` when it fails
                self.errors.append(f"{type(e).__name__}: {e}")
            self._stop.wait(self.interval)

    def _sync(self) -> None:
        seen: dict[str, dict[str, Any]] = {}
        for pod in self.core.api_client.sanitize_for_serialization(
            self.core.list_namespaced_pod(self.namespace)
        )["items"]:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            seen[meta["name"]] = pod
        for name, run in list(self.pods.items()):
            pod = seen.get(name)
            if pod is None or pod["metadata"]["uid"] != run.uid:
                self._teardown(run)
                del self.pods[name]
        statefulsets = self._statefulsets()
        for name, pod in seen.items():
            run = self.pods.get(name)
            if run is None:
                try:
                    run = self._setup(pod, statefulsets)
                except kubernetes.client.ApiException as e:
                    if e.status != 404:
                        raise
                    continue  # deleted since the list (scaled down): nothing made yet
                self.pods[name] = run
                self._launch(run)
                self._report(run)
                continue
            # StatefulSets made after the pod, or rescaled: keep every peer resolvable.
            hosts = self._hosts(pod, statefulsets)
            if hosts != run.hosts:
                (NETNS_DIR / run.netns / "hosts").write_text(hosts)  # in place: it is bind-mounted
                run.hosts = hosts
            self._check(run)

    def _statefulsets(self) -> list[dict[str, Any]]:
        return self.apps.api_client.sanitize_for_serialization(
            self.apps.list_namespaced_stateful_set(self.namespace)
        )["items"]

    # ---- one pod ------------------------------------------------------------------------

    def ip_for(self, pod: str) -> str:
        """The pod's address: allocated once per name, in order of first use."""
        if pod not in self._ips:
            n = len(self._ips) + 2  # .0.1 is the bridge
            self._ips[pod] = f"{SUBNET_PREFIX}.{n // 256}.{n % 256}"
        return self._ips[pod]

    def _hosts(self, pod: dict[str, Any], statefulsets: list[dict[str, Any]]) -> str:
        """/etc/hosts of a pod: itself and every pod of its job, by their DNS names."""
        meta = pod["metadata"]
        job = (meta.get("labels") or {}).get(naming.LABEL_JOB_NAME)
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        names: list[tuple[str, str]] = []
        for sts in statefulsets:
            labels = sts["metadata"].get("labels") or {}
            if job is None or labels.get(naming.LABEL_JOB_NAME) != job:
                continue
            service = sts["spec"].get("serviceName") or sts["metadata"]["name"]
            for i in range(sts["spec"].get("replicas") or 0):
                names.append((f"{sts['metadata']['name']}-{i}", service))
        if not any(p == meta["name"] for p, _ in names):
            names.append((meta["name"], pod["spec"].get("subdomain") or ""))
        for p, service in names:
            fqdn = f"{p}.{service}.{self.namespace}.svc.{CLUSTER_DOMAIN}" if service else ""
            lines.append(f"{self.ip_for(p)}\t{fqdn} {p}".replace("\t ", "\t"))
        return "\n".join(lines) + "\n"

    def _container(self, pod: dict[str, Any]) -> dict[str, Any]:
        containers = pod["spec"]["containers"]
        return next((c for c in containers if c.get("name") == "tensorflow"), containers[0])

    def _env(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        """The container's env as the kubelet builds it, checkpoint claim mapped to a folder."""
        volumes = {
            v["name"]: v["persistentVolumeClaim"]["claimName"]
            for v in pod["spec"].get("volumes") or []
            if v.get("persistentVolumeClaim")
        }
        mounts: list[tuple[str, Path]] = []
        for m in container.get("volumeMounts") or []:
            if m["name"] in volumes:
                host = self.pvc_dir(volumes[m["name"]])
                host.mkdir(parents=True, exist_ok=True)
                mounts.append((m["mountPath"].rstrip("/"), host))
        env: dict[str, str] = {}
        for e in container.get("env") or []:
            if "value" in e or "valueFrom" not in e:
                value = expand(e.get("value") or "", env)
            elif "fieldRef" in e["valueFrom"]:
                value = field_ref(pod, e["valueFrom"]["fieldRef"]["fieldPath"])
            else:
                raise ValueError(f"unsupported valueFrom in env {e['name']}: {e['valueFrom']}")
            for path, host in mounts:
                if value == path or value.startswith(path + "/"):
                    value = str(host) + value[len(path) :]
            env[e["name"]] = value
        return env

    def _argv(self, container: dict[str, Any], env: dict[str, str]) -> list[str]:
        command = list(container.get("command") or [sys.executable, "-m", "tfjob_trainer"])
        if command[0] in ("python", "python3"):
            command[0] = sys.executable
        return [expand(a, env) for a in [*command, *(container.get("args") or [])]]

    def _setup(self, pod: dict[str, Any], statefulsets: list[dict[str, Any]]) -> _Running:
        meta = pod["metadata"]
        name = meta["name"]
        index = naming.pod_index(name)
        labels = dict(meta.get("labels") or {})
        if index is not None and labels.get(naming.LABEL_POD_INDEX) != str(index):
            labels[naming.LABEL_POD_INDEX] = str(index)
            body = {"metadata": {"labels": {naming.LABEL_POD_INDEX: str(index)}}}
            self.core.patch_namespaced_pod(name, self.namespace, body)
            meta["labels"] = labels
        digest = hashlib.sha1(f"{self.namespace}/{name}".encode()).hexdigest()[:8]
        netns, veth = f"tfj-{digest}", f"tfjv{digest}"
        address = self.ip_for(name)
        container = self._container(pod)
        env = self._env(pod, container)
        run = _Running(
            name=name,
            uid=meta["uid"],
            netns=netns,
            veth=veth,
            ip=address,
            container=container["name"],
            image=container.get("image", ""),
            argv=self._argv(container, env),
            env=env,
        )
        run.hosts = self._hosts(pod, statefulsets)
        hosts_dir = NETNS_DIR / netns
        hosts_dir.mkdir(parents=True, exist_ok=True)
        (hosts_dir / "hosts").write_text(run.hosts)
        _ip(["netns", "del", netns], check=False)  # leftovers of a crashed run
        _ip(["link", "del", veth], check=False)
        _ip(["netns", "add", netns])
        _ip(["link", "add", veth, "type", "veth", "peer", "name", f"tfjp{digest}"])
        _ip(["link", "set", f"tfjp{digest}", "netns", netns, "name", "eth0"])
        _ip(["link", "set", veth, "master", BRIDGE, "up"])
        ns = ["-n", netns]
        _ip([*ns, "link", "set", "lo", "up"])
        _ip([*ns, "addr", "add", f"{address}/16", "dev", "eth0"])
        _ip([*ns, "link", "set", "eth0", "up"])
        return run

    def _launch(self, run: _Running) -> None:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TF_CONFIG", "TFJOB_", "KUBECONFIG"))
        }
        env.update(run.env)
        env["HOSTNAME"] = run.name
        argv = [
            "ip",
            "netns",
            "exec",
            run.netns,
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            run.name,
            *run.argv,
        ]
        log = self.log_path(run.name, run.restarts)
        with open(log, "ab") as out:
            run.proc = subprocess.Popen(
                argv,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.workdir,
            )
        run.started_at = _now()
        run.exited_at = None

    def _check(self, run: _Running) -> None:
        """Report an exit once; restart after the backoff."""
        if run.exited_at is None:
            if run.proc is None or run.proc.poll() is None:
                return
            code = _exit_code(run.proc.returncode)
            run.history.append(code)
            self.exits.setdefault(run.name, []).append(code)
            run.prev_terminated = run.last_terminated
            run.last_terminated = {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": run.started_at,
                "finishedAt": _now(),
            }
            run.exited_at = time.monotonic()
            self._report(run)
        elif time.monotonic() - run.exited_at >= self.backoff:
            run.restarts += 1
            self._launch(run)
            self._report(run)

    def _report(self, run: _Running) -> None:
        running = run.exited_at is None
        if running:
            state = {"running": {"startedAt": run.started_at}, "terminated": None}
            last = {"terminated": run.last_terminated} if run.last_terminated else {}
        else:
            state = {"terminated": run.last_terminated, "running": None}
            last = {"terminated": run.prev_terminated} if run.prev_terminated else {}
        cs = {
            "name": run.container,
            "image": run.image,
            "imageID": "",
            "ready": running,
            "started": running,
            "restartCount": run.restarts,
            "state": state,
            "lastState": last,
        }
        body = {"status": {"phase": "Running", "podIP": run.ip, "containerStatuses": [cs]}}
        try:
            self.core.patch_namespaced_pod_status(run.name, self.namespace, body)
        except kubernetes.client.ApiException as e:
            if e.status != 404:  # deleted meanwhile: the next sync tears it down
                raise

    def _teardown(self, run: _Running) -> None:
        if run.proc is not None and run.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                run.proc.wait(10)
        _ip(["netns", "del", run.netns], check=False)
        _ip(["link", "del", run.veth], check=False)
        shutil.rmtree(NETNS_DIR / run.netns, ignore_errors=True)
