"""What every real node of the bed is made of, node 1 (`node.py`, on the host's network, beside
the control plane, DNS and volumes) and node 2 (`second_node.py`, in a network and mount
namespace of its own) alike: `RealNode`, the class both are made from, and the processes it
runs, configured as `nodeconfig.py` says.

- containerd + runc (`containerd_binary`, `ctr`, `import_images`), its image store in the cache;
- kubelet and kube-proxy, and the CNI network of its pods, its config written where containerd
  reads it;
- its processes, started as processes of the bed's one control plane (recorded in pids.json,
  stopped with the plane), and the kernel settings kubelet changes put back (`read_sysctls`,
  `restore_sysctls`);
- for a teardown from the records alone: its shims and the processes of its pods' cgroups
  (`shims_of`, `kill_pods_of`).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfjob_testbed.controlplane.errors import log_tail
from tfjob_testbed.controlplane.plane import ControlPlane
from tfjob_testbed.core.gobuild import CONTAINERD, ensure
from tfjob_testbed.core.procs import alive
from tfjob_testbed.core.tools import ensure_tools
from tfjob_testbed.nodes.capacity import host_shortfall
from tfjob_testbed.nodes.host import NodeError, cgroup_hierarchies, cgroup_tops, run, sysctl_path
from tfjob_testbed.nodes.nodeconfig import (
    BRIDGE,
    CLUSTER_DNS,
    GPUS,
    KUBELET_SYSCTLS,
    SYSCTLS,
    cni_conflist,
    containerd_config,
    kube_proxy_argv,
    kubelet_argv,
    kubelet_config,
)


def log(message: str, who: str = "node") -> None:
    """A progress line: `[who HH:MM:SS] message`."""
    print(f"[{who} {time.strftime('%H:%M:%S')}] {message}", flush=True)


def read_sysctls() -> dict[str, str]:
    """The current value of every setting in SYSCTLS that this kernel has."""
    values = {}
    for key in SYSCTLS:
        with contextlib.suppress(OSError):
            values[key] = sysctl_path(key).read_text().strip()
    return values


def restore_sysctls(saved: dict[str, str], keys: tuple[str, ...] = SYSCTLS) -> None:
    """Put back the settings of `keys` that `saved` (`read_sysctls`) has, where they changed."""
    for key, value in saved.items():
        if key not in keys:
            continue
        path = sysctl_path(key)
        with contextlib.suppress(OSError):
            if path.read_text().strip() != value:
                path.write_text(value + "\n")


def containerd_binary(name: str) -> Path:
    """containerd, its runc shim or ctr, built from containerd's Go module."""
    ensure(CONTAINERD)
    return CONTAINERD.path(name)


def containerd_env() -> dict[str, str]:
    """containerd finds its shim on PATH: the built one first."""
    return dict(os.environ, PATH=f"{CONTAINERD.bin_dir()}:{os.environ.get('PATH', '')}")


def ctr(
    socket: Path, *args: str, check: bool = True, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """`ctr` against the containerd at `socket`, in Kubernetes' namespace."""
    argv = [str(containerd_binary("ctr")), "--address", str(socket), "-n", "k8s.io", *args]
    return run(*argv, check=check, timeout=timeout)


def import_images(socket: Path, store: Path, archives: list[Path]) -> None:
    """Import each archive once into the containerd at `socket`, whose image store is `store`:
    a record in the store names what it already holds."""
    record = store / "imported.json"
    done = set(json.loads(record.read_text())) if record.exists() else set()
    present = ctr(socket, "images", "ls", "-q").stdout.split()
    for archive in archives:
        tags = _archive_tags(archive)
        if str(archive) in done and all(t in present for t in tags):
            continue
        log(f"importing {archive.name} into containerd ({store.name})")
        ctr(socket, "images", "import", "--snapshotter", "overlayfs", "--no-unpack", str(archive))
        done.add(str(archive))
        record.write_text(json.dumps(sorted(done)))


def _archive_tags(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("manifest.json")
        assert member is not None
        return [t for entry in json.load(member) for t in entry.get("RepoTags") or []]


def kubectl_path() -> str:
    """The kubectl the bed runs (see `core/tools.py`)."""
    return str(ensure_tools().kubectl)


def read_container_log(pod_logs: Path, namespace: str, pod: str, container: str) -> str:
    """The messages of a container's newest run, from a kubelet's log files in `pod_logs`
    (its /var/log/pods)."""
    runs = sorted(
        pod_logs.glob(f"{namespace}_{pod}_*/{container}/*.log"),
        key=lambda p: int(p.stem) if p.stem.isdigit() else -1,
    )
    if not runs:
        return ""
    # CRI format: "<time> <stream> <F|P> <message>"
    lines = runs[-1].read_text(errors="replace").splitlines()
    return "\n".join(line.split(" ", 3)[3] for line in lines if line.count(" ") >= 3)


def shims_of(socket_path: Path) -> list[int]:
    """The PIDs of the runc shims of the containerd at `socket_path`."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            cmdline
            and cmdline[0].endswith(b"containerd-shim-runc-v2")
            and str(socket_path).encode() in cmdline
        ):
            pids.append(int(proc.name))
    return pids


def kill_pods_of(socket_path: Path, root: str, timeout: float = 30) -> None:
    """SIGKILL a node's shims and every process in its pods' cgroups (under `root`) until none
    is left: after a crash of the bed its containers may outlive their shims."""
    deadline = time.monotonic() + timeout
    while True:
        pids = set(shims_of(socket_path))
        for top in cgroup_tops(root):
            for procs in top.rglob("cgroup.procs"):
                with contextlib.suppress(OSError, ValueError):
                    pids.update(int(p) for p in procs.read_text().split())
        victims = {p for p in pids if alive(p) and p != os.getpid()}
        if not victims or time.monotonic() > deadline:
            return
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


class RealNode:
    """One real node of the bed: its containerd (its own image store), kubelet and kube-proxy,
    started as processes of the bed's one control plane (`plane`), its pods on its bridge
    BRIDGE with addresses from `pod_cidr`. `node.Node` and `second_node.SecondNode` are made
    from it; each says how a process of it is started (`spawn`) and how its kube-proxy's rules
    are seen.

    `dir` holds its state; `bed` is node 1's state dir, with the records a teardown works from
    (host.json, the host as it was; pids.json, every process of the plane, both nodes').
    """

    name: str  # its Node object's
    address: str  # its node IP, on its bridge
    pod_cidr: str  # its pods' addresses
    suffix: str = ""  # of its processes' names in the plane (and of their logs): kubelet-2
    label: str = "node"  # what its progress lines start with
    cgroup_root: str | None = None  # kubelet's cgroupRoot, without the leading /; None: "/"

    def __init__(
        self, directory: Path, *, bed: Path, plane: ControlPlane, kubeconfig: Path, store: Path
    ) -> None:
        self.dir = directory
        self.bed = bed
        self.plane = plane
        self.kubeconfig = kubeconfig
        self.store = store  # containerd's image store, in the cache: images imported once
        self.timings: dict[str, float] = {}

    def check_room(self, archives: list[Path]) -> None:
        """Stop before starting, with one line, if the host lacks the disk or memory it needs."""
        reason = host_shortfall(self.dir, self.store, archives)
        if reason:
            raise NodeError(f"{self.name}: {reason}")

    @property
    def socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    @property
    def pod_logs(self) -> Path:
        """Its kubelet's /var/log/pods, as the host sees it."""
        return Path("/var/log/pods")

    def process(self, what: str) -> str:
        """The name in the plane (and of the log) of its containerd, kubelet or kube-proxy."""
        return f"{what}{self.suffix}"

    def log(self, message: str) -> None:
        log(message, self.label)

    # -- bring-up ---------------------------------------------------------------------------

    def step(self, what: str, action: Callable[[], object]) -> None:
        """One step of a bring-up: timed, then every process of the plane recorded."""
        t0 = time.monotonic()
        action()
        self.timings[what] = time.monotonic() - t0
        self.save_pids()
        self.log(f"{what}: {self.timings[what]:.1f} s")

    def save_pids(self) -> None:
        """Every process of the plane (both nodes'), for a teardown from the records alone."""
        (self.bed / "pids.json").write_text(json.dumps(self.plane.processes()))

    def host_record(self) -> dict[str, Any]:
        """The host as it was before the bed changed it (node 1 wrote it: host.json)."""
        record: dict[str, Any] = json.loads((self.bed / "host.json").read_text())
        return record

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Start one of its processes, as a process of the plane."""
        self.plane.spawn(name, argv, env=env)

    def write_cni_config(self) -> None:
        """Its pods' network (`cni_conflist`), where its containerd reads it."""
        cni = self.dir / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        conf = cni_conflist(BRIDGE, self.pod_cidr, self.address, cni / "ipam")
        (cni / "net.d" / "10-tfjob.conflist").write_text(json.dumps(conf, indent=1))

    def make_cgroup_root(self) -> None:
        """Its `cgroup_root` in every cgroup v1 hierarchy: kubelet wants its cgroupRoot to
        exist (kubelet's default root, with None, does)."""
        if self.cgroup_root is None:
            return
        for hierarchy in cgroup_hierarchies():
            top = hierarchy / self.cgroup_root
            top.mkdir(exist_ok=True)
            for key in ("cpuset.cpus", "cpuset.mems"):  # a new cpuset has none: the host's
                if (hierarchy / key).exists() and not (top / key).read_text().strip():
                    (top / key).write_text((hierarchy / key).read_text())

    def start_containerd(self, deadline: float = math.inf) -> None:
        """Start its containerd and return once it answers (within 30 s, and by `deadline`)."""
        d = self.dir / "containerd"
        d.mkdir(parents=True, exist_ok=True)
        self.store.mkdir(parents=True, exist_ok=True)
        config = containerd_config(self.store / "root", d, self.socket, self.dir / "cni" / "net.d")
        (d / "config.toml").write_text(config)
        name = self.process("containerd")
        self.spawn(
            name,
            [str(containerd_binary("containerd")), "--config", str(d / "config.toml")],
            env=containerd_env(),
        )
        self.until(
            min(deadline, time.monotonic() + 30),
            name,
            lambda: self.ctr("version", check=False).returncode == 0,
        )

    def ctr(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        """`ctr` against its containerd."""
        return ctr(self.socket, *args, check=check, timeout=timeout)

    def import_images(self, archives: list[Path]) -> None:
        """Import archives into its own store, each once (a record in the store names what it
        already holds)."""
        import_images(self.socket, self.store, archives)

    def start_kubelet(self, deadline: float) -> None:
        """Start its kubelet and return once its Node is Ready with its GPUs advertised."""
        d = self.dir / "kubelet"
        d.mkdir(parents=True, exist_ok=True)
        (d / "resolv.conf").write_text(f"nameserver {CLUSTER_DNS}\n")  # node 1's, routed to
        cgroup_root = None if self.cgroup_root is None else f"/{self.cgroup_root}"
        config = kubelet_config(
            d, self.address, self.plane.workdir / "pki", self.socket, cgroup_root=cgroup_root
        )
        (d / "config.yaml").write_text(json.dumps(config, indent=1))
        name = self.process("kubelet")
        env = dict(os.environ, AWS_EC2_METADATA_DISABLED="true")  # no cloud metadata probe
        self.spawn(name, kubelet_argv(d, self.kubeconfig, self.name, self.address), env=env)
        kubelet_log = self.plane.workdir / f"{name}.log"
        # kubelet sets its kernel tunables once at start and never looks again: once it has
        # (the device plugin manager starts right after), the host's values go back. They are
        # the host's, not a namespace's: the same after a second node's kubelet.
        self.until(
            deadline,
            f"{name} start",
            lambda: "Starting Device Plugin manager" in kubelet_log.read_text(errors="replace"),
        )
        restore_sysctls(self.host_record()["sysctls"], KUBELET_SYSCTLS)
        self.until(deadline, f"node {self.name} Ready", self.node_ready)
        self.advertise_gpus(self.name, deadline)

    def advertise_gpus(self, name: str, deadline: float) -> None:
        """Give node `name` GPUS nvidia.com/gpu of capacity, as a device plugin would."""
        self.api(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": {"capacity": {"nvidia.com/gpu": str(GPUS)}}},
        )
        self.until(
            deadline,
            f"nvidia.com/gpu allocatable on {name}",
            lambda: (
                (self.api("GET", f"/api/v1/nodes/{name}") or {})
                .get("status", {})
                .get("allocatable", {})
                .get("nvidia.com/gpu")
                == str(GPUS)
            ),
        )

    def start_kube_proxy(self, deadline: float, written: Callable[[], object]) -> None:
        """Start its kube-proxy and return once `written()` holds: its rules are there."""
        name = self.process("kube-proxy")
        self.spawn(name, kube_proxy_argv(self.kubeconfig, self.name, self.address))
        self.until(deadline, f"{name} rules for the kubernetes Service", written)

    # -- the API server and waiting -------------------------------------------------------

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """GET a path of the API server (None if that fails), or merge-PATCH a node's status."""
        args = ["--kubeconfig", str(self.kubeconfig)]
        kubectl = kubectl_path()
        if method == "GET":
            proc = run(kubectl, *args, "get", "--raw", path, check=False)
            return json.loads(proc.stdout) if proc.returncode == 0 else None
        kind, name = path.split("/")[-3], path.split("/")[-2]
        assert (kind, path.endswith("/status")) == ("nodes", True)
        run(kubectl, *args, "patch", "node", name, "--subresource=status", "--type=merge",
            "-p", json.dumps(body))  # fmt: skip
        return None

    def node_ready(self, name: str | None = None) -> bool:
        """Whether Node `name` (this one's, by default) is Ready."""
        node = self.api("GET", f"/api/v1/nodes/{name or self.name}") or {}
        conds = node.get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    def until(self, deadline: float, what: str, check: Callable[[], object]) -> None:
        """Poll `check` until it holds; NodeError once `deadline` passes or a process of the
        plane exits (with its log)."""
        delay = 0.05
        while not check():
            for name, pid in self.plane.processes().items():
                if not alive(pid):
                    process_log = self.plane.workdir / f"{name}.log"
                    raise NodeError(
                        f"{name} exited while waiting for {what}\n{log_tail(process_log)}"
                    )
            if time.monotonic() > deadline:
                raise NodeError(f"timed out waiting for {what}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    # -- faults and logs --------------------------------------------------------------------

    def kill_container(self, container_id: str) -> None:
        """SIGKILL a container's process through its containerd, as the kernel's OOM killer or a
        crash would end it: `container_id` is a pod's `containerd://...` containerID."""
        self.ctr("tasks", "kill", "--signal", "SIGKILL", container_id.removeprefix("containerd://"))

    def container_log(self, namespace: str, pod: str, container: str = "tensorflow") -> str:
        """The messages of a container's newest run on this node, from its kubelet's log files
        on disk: readable while the node is partitioned or the API server is down."""
        return read_container_log(self.pod_logs, namespace, pod, container)
