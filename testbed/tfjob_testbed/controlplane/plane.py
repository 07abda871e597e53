"""A real Kubernetes control plane for integration tests, without Docker or a cluster.

etcd, kube-apiserver and kube-controller-manager run as local processes on
127.0.0.1, with free ports picked at start.  The controller-manager makes
StatefulSets create Pods, ServiceAccounts get tokens and owner-reference garbage
collection works; there is no kubelet, so Pods stay Pending.

Usage from the repo root::

    python -m tfjob_testbed.controlplane.plane up [--workdir DIR]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from tfjob_testbed.controlplane.argv import (
    SERVICE_CLUSTER_IP_RANGE,
    Certs,
    apiserver_argv,
    controller_manager_argv,
    etcd_argv,
    scheduler_argv,
)
from tfjob_testbed.controlplane.audit import AUDIT_POLICY
from tfjob_testbed.controlplane.binaries import Binaries, ensure_binaries, node_binary
from tfjob_testbed.controlplane.errors import ControlPlaneError, log_tail
from tfjob_testbed.controlplane.pki import Pki
from tfjob_testbed.core.procs import free_port, free_ports, terminate


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode("ascii")


def _load_prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def _child_setup(parent_pid: int) -> Callable[[], None]:
    """Have the kernel SIGTERM the child if this process dies without calling stop().

    The child also gets its own process group (setsid), so stop() can signal the whole
    group and a terminal's Ctrl-C reaches only this process, which stops the plane in order.
    PDEATHSIG fires when the *thread* that started the child exits: start the plane from a
    thread that outlives it (normally the main thread).
    """

    def setup() -> None:
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent_pid:  # parent died before prctl took effect
                os._exit(1)

    return setup


@dataclass
class _Process:
    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    argv: list[str]
    env: dict[str, str] | None


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on loopback, as a context manager.

    ``kubeconfig`` is an admin (system:masters) client-certificate kubeconfig with
    the credentials embedded, so it stays valid wherever it is copied.
    """

    def __init__(
        self,
        workdir: Path,
        binaries: Binaries | None = None,
        *,
        address: str = "127.0.0.1",
        node: bool = False,
        audit_policy: dict[str, Any] | None = None,
        controller_manager_args: Sequence[str] = (),
    ) -> None:
        """``node``: serve a real node too, on ``address`` (an address of this host that
        pods reach): the ``kubernetes`` Service gets that endpoint, kube-scheduler runs, and
        the API server reaches the kubelet by its InternalIP with a client certificate.
        ``audit_policy``: what the audit log keeps (default: writes to the operator's kinds).
        ``controller_manager_args``: flags added to kube-controller-manager's (its client
        limits, for a benchmark)."""
        self.workdir = Path(workdir).absolute()
        self.audit_policy = audit_policy or AUDIT_POLICY
        self.binaries = binaries
        self.address = address
        self.node = node
        self.controller_manager_args = list(controller_manager_args)
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self.audit_log = self.workdir / "audit.log"
        self.server = ""
        self._procs: list[_Process] = []
        self._ssl: ssl.SSLContext | None = None
        self._lock = threading.Lock()

    # -- public API -------------------------------------------------------------

    def start(self, timeout: float = 90) -> ControlPlane:
        """Start all processes and return once the API serves and ServiceAccounts work."""
        if self._procs:
            raise ControlPlaneError("control plane already started")
        deadline = time.monotonic() + timeout
        try:
            self._start(deadline)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 15) -> None:
        """Stop all processes, newest first: SIGTERM, then SIGKILL after ``timeout``."""
        with self._lock:
            procs, self._procs = self._procs, []
        for proc in reversed(procs):
            self._terminate(proc, timeout)

    def audit(self) -> list[dict[str, Any]]:
        """The audit log so far: one event per write to the operator's kinds."""
        if not self.audit_log.exists():
            return []
        return [json.loads(line) for line in self.audit_log.read_text().splitlines() if line]

    def env(self) -> dict[str, str]:
        """os.environ with KUBECONFIG pointing at the admin kubeconfig, for subprocesses."""
        return dict(os.environ, KUBECONFIG=str(self.kubeconfig))

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- start-up ---------------------------------------------------------------

    def _start(self, deadline: float) -> None:
        binaries = self.binaries or ensure_binaries()
        self.binaries = binaries
        self.workdir.mkdir(parents=True, exist_ok=True)
        for sub in ("etcd-data", "pki", "flexvolume"):
            shutil.rmtree(self.workdir / sub, ignore_errors=True)
        pki_dir = self.workdir / "pki"
        pki_dir.mkdir(mode=0o700)
        (self.workdir / "flexvolume").mkdir()

        etcd_port, peer_port = free_ports(2)
        api_port = free_port(self.address)
        self.server = f"https://{self.address}:{api_port}"
        pki = self._make_pki(pki_dir)
        self._write_kubeconfig(self.kubeconfig, pki)
        kcm_kubeconfig = self.workdir / "kube-controller-manager.kubeconfig"
        self._write_kubeconfig(kcm_kubeconfig, pki)

        audit_policy = self.workdir / "audit-policy.json"
        audit_policy.write_text(json.dumps(self.audit_policy))
        self.audit_log.unlink(missing_ok=True)
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        etcd = self._spawn(
            "etcd", etcd_argv(binaries.etcd, self.workdir / "etcd-data", etcd_url, peer_url)
        )
        self._wait(deadline, etcd, "etcd /health", lambda: self._etcd_healthy(etcd_url))

        apiserver = self._spawn(
            "kube-apiserver",
            apiserver_argv(
                binaries.kube_apiserver,
                etcd_url=etcd_url,
                pki_dir=pki_dir,
                pki=pki,
                address=self.address,
                port=api_port,
                audit_policy=audit_policy,
                audit_log=self.audit_log,
                node=self.node,
                gangs=binaries.gangs,
            ),
        )
        self._ssl = ssl.create_default_context(cafile=str(pki["ca"][0]))
        self._ssl.load_cert_chain(str(pki["admin"][0]), str(pki["admin"][1]))
        self._wait(
            deadline, apiserver, "kube-apiserver /readyz", lambda: self._get("/readyz") is not None
        )

        kcm = self._spawn(
            "kube-controller-manager",
            controller_manager_argv(
                binaries.kube_controller_manager,
                kubeconfig=kcm_kubeconfig,
                pki=pki,
                flexvolume_dir=self.workdir / "flexvolume",
                node=self.node,
                gangs=binaries.gangs,
            )
            + self.controller_manager_args,
        )
        if self.node:
            self._spawn(
                "kube-scheduler",
                scheduler_argv(node_binary("kube-scheduler"), kcm_kubeconfig, binaries.gangs),
            )
        # Pod admission needs the namespace's default ServiceAccount.
        self._wait(
            deadline,
            kcm,
            "ServiceAccount default/default",
            lambda: isinstance(
                self._get("/api/v1/namespaces/default/serviceaccounts/default"), dict
            ),
        )

    def serving_cert(self, name: str, sans: list[str]) -> tuple[Path, Path]:
        """A server certificate and key signed by the plane's CA (which its API server trusts
        and `ca` names), for a webhook served beside it."""
        pki = self.workdir / "pki"
        return Pki(pki).leaf(name, f"/CN={name}", (pki / "ca.crt", pki / "ca.key"), sans=sans)

    @property
    def ca(self) -> Path:
        return self.workdir / "pki" / "ca.crt"

    def processes(self) -> dict[str, int]:
        """Name -> PID of every process started, for a teardown from another process."""
        with self._lock:
            return {p.name: p.popen.pid for p in self._procs}

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Start another process that lives and stops with the plane (newest stops first)."""
        proc = self._spawn(name, argv, env)
        self._wait(time.monotonic() + 1, proc, name, lambda: True)

    def stop_process(self, name: str, timeout: float = 15) -> None:
        """Stop one process (a fault to inject); `start_process` brings it back as it was."""
        with self._lock:
            proc = next(p for p in self._procs if p.name == name)
        self._terminate(proc, timeout)

    def forget(self, names: tuple[str, ...], sig: int = signal.SIGKILL) -> None:
        """Signal the processes named and drop them for good: they never come back (a dead one
        kept here would fail every later wait)."""
        with self._lock:
            gone = [p for p in self._procs if p.name in names]
            self._procs = [p for p in self._procs if p.name not in names]
        for proc in reversed(gone):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, sig)
            try:
                proc.popen.wait(15)
            except subprocess.TimeoutExpired:
                terminate(proc.popen, 0, group=True)
            proc.log_file.close()

    def start_process(self, name: str) -> None:
        """Start a process stopped by `stop_process` again, with the same command line; it
        keeps its place in the stop order. Its log starts anew."""
        with self._lock:
            index, old = next((i, p) for i, p in enumerate(self._procs) if p.name == name)
        if old.popen.poll() is None:
            raise ControlPlaneError(f"{name} is still running")
        new = self._spawn(name, old.argv, old.env)
        with self._lock:
            self._procs.remove(new)
            self._procs[index] = new
        self._wait(time.monotonic() + 1, new, name, lambda: True)

    def _make_pki(self, pki_dir: Path) -> Certs:
        pki = Pki(pki_dir)
        ca = pki.ca("ca", "tfjob-test-ca")
        front_proxy_ca = pki.ca("front-proxy-ca", "tfjob-test-front-proxy-ca")
        service_ip = SERVICE_CLUSTER_IP_RANGE.rsplit(".", 1)[0] + ".1"
        sans = [
            "IP:127.0.0.1",
            *([f"IP:{self.address}"] if self.address != "127.0.0.1" else []),
            f"IP:{service_ip}",
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
        ]
        return {
            "ca": ca,
            "front-proxy-ca": front_proxy_ca,
            "serving": pki.leaf("apiserver", "/CN=kube-apiserver", ca, sans=sans),
            "admin": pki.leaf("admin", "/O=system:masters/CN=admin", ca, client=True),
            "proxy-client": pki.leaf(
                "proxy-client", "/CN=front-proxy-client", front_proxy_ca, client=True
            ),
            "sa": pki.rsa_key_pair("service-account"),
        }

    def _write_kubeconfig(self, path: Path, pki: Certs) -> None:
        # JSON is valid YAML: no YAML library needed to write it.
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "tfjob-test",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": _b64(pki["ca"][0]),
                    },
                }
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate-data": _b64(pki["admin"][0]),
                        "client-key-data": _b64(pki["admin"][1]),
                    },
                }
            ],
            "contexts": [
                {"name": "tfjob-test", "context": {"cluster": "tfjob-test", "user": "admin"}}
            ],
            "current-context": "tfjob-test",
        }
        path.write_text(json.dumps(config, indent=2) + "\n")
        path.chmod(0o600)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> _Process:
        log_path = self.workdir / f"{name}.log"
        log_file = log_path.open("wb")
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=env,
                start_new_session=True,
                preexec_fn=_child_setup(os.getpid()),
            )
        except BaseException:
            log_file.close()
            raise
        proc = _Process(name, popen, log_path, log_file, argv, env)
        with self._lock:
            self._procs.append(proc)
        return proc

    def _wait(self, deadline: float, proc: _Process, what: str, check: Callable[[], bool]) -> None:
        """Poll ``check`` until it holds; fail fast if any process exits."""
        delay = 0.05
        while True:
            for p in self._procs:
                code = p.popen.poll()
                if code is not None:
                    raise ControlPlaneError(
                        f"{p.name} exited with code {code} while waiting for {what}\n"
                        f"--- last lines of {p.log_path} ---\n{log_tail(p.log_path)}"
                    )
            if check():
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"timed out waiting for {what}\n"
                    f"--- last lines of {proc.log_path} ---\n{log_tail(proc.log_path)}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    @staticmethod
    def _etcd_healthy(url: str) -> bool:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                return bool(json.load(resp).get("health") == "true")
        except (OSError, ValueError):
            return False

    def _get(self, path: str) -> Any | None:
        """GET from the API server as admin; None unless it answers 200."""
        try:
            with urllib.request.urlopen(
                f"{self.server}{path}", timeout=5, context=self._ssl
            ) as resp:
                body = resp.read()
        except (urllib.error.URLError, OSError):
            return None
        try:
            return json.loads(body)
        except ValueError:
            return body.decode(errors="replace")

    # -- shutdown ---------------------------------------------------------------

    @staticmethod
    def _terminate(proc: _Process, timeout: float) -> None:
        try:
            terminate(proc.popen, timeout, group=True)
        finally:
            proc.log_file.close()


@contextlib.contextmanager
def running_control_plane(
    workdir: Path | None = None, timeout: float = 90
) -> Iterator[ControlPlane]:
    """A started ControlPlane in ``workdir`` (a temporary directory if None)."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tfjob-cp-")))
        plane = ControlPlane(workdir)
        plane.start(timeout=timeout)
        stack.callback(plane.stop)
        yield plane


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tfjob_testbed.controlplane.plane",
        description="Kubernetes control plane for tests",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a control plane and wait until Ctrl-C")
    up.add_argument("--workdir", type=Path, help="state and logs (default: a temporary directory)")
    args = parser.parse_args(argv)

    # Ctrl-C and SIGTERM both stop the plane cleanly, even where a shell started this
    # process with SIGINT ignored (background jobs).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    started = time.monotonic()
    with running_control_plane(args.workdir) as plane:
        print(f"ready in {time.monotonic() - started:.1f} s: {plane.server}")
        print(f"logs in {plane.workdir}")
        print(f"export KUBECONFIG={plane.kubeconfig}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("stopping")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
