"""A real Kubernetes node on this host: containerd + runc, kubelet, kube-proxy, a CNI bridge,
cluster DNS and volumes, beside the control plane of `controlplane.py`.

Everything binds to the bridge address (10.244.0.1) or loopback; pods get no default route,
so their traffic reaches only the nodes' pods (CLUSTER_CIDR: a second node's too, see
`second_node.py`), the Service range and nothing else. What the bed
changes on the host is recorded before it changes it and put back by `teardown`, which works
from the records alone (so `make cluster-down` works after a crash, too):

- processes: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd and
  its shims, kubelet, kube-proxy, dnsmasq, the DNS/volume service;
- the second node, when `Node.second` brought one up (see `second_node.py`): its processes,
  network and mount namespaces, veth, cgroups and state;
- the bridge `tfjob0`, pod network namespaces (`/run/netns/cni-*`), kube-proxy's iptables
  chains (`KUBE-*`);
- mounts under the state dir and the paths kubelet and containerd write outside it
  (`/var/lib/kubelet`, `/var/log/pods`, `/var/log/containers`, `/var/lib/cni`,
  `/run/containerd`), and the `kubepods` cgroups;
- kernel settings kubelet, kube-proxy and the bridge plugin change (`SYSCTLS`).

containerd's image store lives in the cache (like podman's), so images are imported once.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfjob_testbed.controlplane import (
    SERVICE_CLUSTER_IP_RANGE,
    ControlPlane,
    log_tail,
    node_binary,
)
from tfjob_testbed.gobuild import CONTAINERD, KUBERNETES, ensure, module_source
from tfjob_testbed.paths import cache_dir
from tfjob_testbed.procs import alive, terminate
from tfjob_testbed.tools import ensure_tools

if TYPE_CHECKING:
    from tfjob_testbed.second_node import SecondNode

HOST_PACKAGES = Path(__file__).with_name("host-packages.sh")
BRIDGE = "tfjob0"
NODE_IP = "10.244.0.1"
POD_CIDR = "10.244.0.0/24"
# Every node's pods: node 1 has 10.244.0.0/24, the second node 10.244.1.0/24. Pods route the
# whole range to their bridge, and kube-proxy treats it as in-cluster traffic.
CLUSTER_CIDR = "10.244.0.0/16"
NODE_NAME = "tfjob-node"
CLUSTER_DOMAIN = "cluster.local"
SHARED_STORAGE_CLASS = "shared"  # ReadWriteMany volumes every node sees (the default: `standard`)
NETNS_DIR = "/run/netns"
GPUS = 2  # nvidia.com/gpu capacity the node advertises: the GPU examples schedule, on CPU
PAUSE_IMAGE = "localhost/tfjob-pause:3.10.2"
# Kernel settings something in the bed may change: kubelet (its kernel tunables), kube-proxy
# (route_localnet) and the CNI bridge plugin (ip_forward). Saved before, restored after.
SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
)
# The ones kubelet sets at each start: put back right after it, also after a restart. The network
# ones are the CNI plugin's and kube-proxy's while pods run (pod traffic stalls if ip_forward goes
# back mid-run), and only teardown restores them.
KUBELET_SYSCTLS = tuple(k for k in SYSCTLS if not k.startswith("net."))
# Paths kubelet and containerd write whatever their configured roots are.
FIXED_PATHS = (
    "/var/lib/kubelet",
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/cni",
    "/run/containerd",
)
# Process name -> what its /proc/PID/exe must end with, so a recycled PID is never signalled.
EXES = {
    "etcd": "etcd",
    "kube-apiserver": "kube-apiserver",
    "kube-controller-manager": "kube-controller-manager",
    "kube-scheduler": "kube-scheduler",
    "containerd": "containerd",
    "kubelet": "kubelet",
    "kube-proxy": "kube-proxy",
    "dnsmasq": "dnsmasq",
    "nodeservices": "python3.11",
    # The second node's (second_node.py): nsenter execs them, so the PID is the binary's.
    "containerd-2": "containerd",
    "kubelet-2": "kubelet",
    "kube-proxy-2": "kube-proxy",
}
# A lost node is noticed in about 20 s (kubelets post status every 4 s, their lease lasts 20 s,
# the controller-manager's --node-monitor-grace-period is 20 s), for the tests' speed: the real
# defaults (10 s, 40 s, 40 s) would make every node-loss test wait twice as long.
NODE_STATUS_UPDATE_FREQUENCY = "4s"
NODE_LEASE_DURATION_SECONDS = 20


class NodeError(RuntimeError):
    """The node could not be brought up; the message says which part and shows its log."""


def containerd_binary(name: str) -> Path:
    """containerd, its runc shim or ctr, built from containerd's Go module."""
    ensure(CONTAINERD)
    return CONTAINERD.path(name)


def containerd_env() -> dict[str, str]:
    """containerd finds its shim on PATH: the built one first."""
    return dict(os.environ, PATH=f"{CONTAINERD.bin_dir()}:{os.environ.get('PATH', '')}")


def kubernetes_source(path: str) -> Path:
    """A file of the Kubernetes release the bed runs, from its Go module."""
    return module_source(KUBERNETES, path)


def state_dir() -> Path:
    """Where a running node keeps its state (one node per host: the bridge is fixed)."""
    return Path(os.environ.get("TFJOB_NODE_DIR", "/tmp/tfjob-node"))


def missing_prerequisites() -> str | None:
    """Why a node cannot run here, or None."""
    if os.geteuid() != 0:
        return "a real node needs root (network namespaces, mounts, iptables)"
    return None


def _run(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def _log(message: str) -> None:
    print(f"[node {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _sysctl_path(key: str) -> Path:
    return Path("/proc/sys") / key.replace(".", "/")


def read_sysctls() -> dict[str, str]:
    """The current value of every setting in SYSCTLS that this kernel has."""
    values = {}
    for key in SYSCTLS:
        with contextlib.suppress(OSError):
            values[key] = _sysctl_path(key).read_text().strip()
    return values


def _restore_sysctls(saved: dict[str, str], keys: tuple[str, ...] = SYSCTLS) -> None:
    for key, value in saved.items():
        if key not in keys:
            continue
        path = _sysctl_path(key)
        with contextlib.suppress(OSError):
            if path.read_text().strip() != value:
                path.write_text(value + "\n")


def iptables_chains() -> set[str]:
    """Every `table/chain` of the host's iptables (the backend `iptables` picks)."""
    chains = set()
    table = ""
    for line in _run("iptables-save").stdout.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith(":"):
            chains.add(f"{table}/{line[1:].split()[0]}")
    return chains


def remove_chains(chains: list[str]) -> None:
    """Flush and delete iptables chains (`table/chain`), and first every rule of another chain
    that jumps to one of them (kubelet hooks its KUBE-FIREWALL into INPUT and OUTPUT)."""
    by_table: dict[str, set[str]] = {}
    for chain in chains:
        table, name = chain.split("/", 1)
        by_table.setdefault(table, set()).add(name)
    for table, names in by_table.items():
        for line in _run("iptables-save", "-t", table).stdout.splitlines():
            rule = shlex.split(line) if line.startswith("-A ") else []
            jumps_to = rule[rule.index("-j") + 1] if "-j" in rule[:-1] else ""
            if rule and rule[1] not in names and jumps_to in names:
                _run("iptables", "-t", table, "-D", *rule[1:], check=False)
        for flag in ("-F", "-X"):
            for name in sorted(names):
                _run("iptables", "-t", table, flag, name, check=False)


def cni_conflist(bridge: str, subnet: str, gateway: str, ipam_dir: Path) -> dict[str, Any]:
    """The CNI network of one node: a bridge, addresses from `subnet`, routes to every node's
    pods (CLUSTER_CIDR) and the Services through the bridge, no way out."""
    return {
        "cniVersion": "0.4.0",
        "name": "tfjob",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": True,
                "ipMasq": False,  # no way out: pods reach the nodes and Services only
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [[{"subnet": subnet, "gateway": gateway}]],
                    "routes": [{"dst": CLUSTER_CIDR}, {"dst": SERVICE_CLUSTER_IP_RANGE}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def containerd_config(root: Path, state: Path, socket: Path, cni_conf_dir: Path) -> str:
    """containerd's config.toml: images in `root` (the cache), everything else in `state`."""
    runtime = '[plugins."io.containerd.cri.v1.runtime"'
    return f"""version = 4
root = "{root}"
state = "{state}/state"
oom_score = 0
imports = []
[plugins."io.containerd.server.v1.grpc"]
  address = "{socket}"
[plugins."io.containerd.server.v1.ttrpc"]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{state}/opt"
# NRI's socket is a fixed path that two nodes on one host would share; no NRI plugin runs here.
[plugins."io.containerd.nri.v1.nri"]
  disable = true
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"
{runtime}]
  enable_selinux = false
  # root here lacks CAP_SYS_RESOURCE: kubelet's negative oom_score_adj would fail every sandbox
  restrict_oom_score_adj = true
  disable_apparmor = true
  disable_hugetlb_controller = true
  {runtime}.containerd]
    default_runtime_name = "runc"
    {runtime}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      {runtime}.containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
        Root = "{state}/runc"
  {runtime}.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{cni_conf_dir}"
    max_conf_num = 1
"""


def kubelet_config(
    directory: Path, address: str, pki: Path, socket: Path, cgroup_root: str | None = None
) -> dict[str, Any]:
    """A kubelet's KubeletConfiguration, serving on `address`, its files in `directory`, its
    containerd at `socket`."""
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": f"unix://{socket}",
        "address": address,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "cgroupDriver": "cgroupfs",
        # These hosts run cgroup v1, which kubelet refuses from 1.35 on unless told otherwise.
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDomain": CLUSTER_DOMAIN,
        "clusterDNS": [NODE_IP],  # dnsmasq on node 1's bridge, routed to from every node
        "resolvConf": str(directory / "resolv.conf"),
        "volumePluginDir": str(directory / "volume-plugins"),
        "makeIPTablesUtilChains": False,
        # No registry: every image is imported, so none may be collected.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "serializeImagePulls": False,
        "maxPods": 60,
        # Test speed: a lost node noticed in ~20 s (see NODE_LEASE_DURATION_SECONDS).
        "nodeStatusUpdateFrequency": NODE_STATUS_UPDATE_FREQUENCY,
        "nodeLeaseDurationSeconds": NODE_LEASE_DURATION_SECONDS,
    }
    if cgroup_root is not None:
        config["cgroupRoot"] = cgroup_root
    return config


def kubelet_argv(directory: Path, kubeconfig: Path, name: str, address: str) -> list[str]:
    """A node's kubelet, its config in `directory`."""
    return [
        str(node_binary("kubelet")),
        f"--config={directory / 'config.yaml'}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={directory / 'root'}",
        f"--cert-dir={directory / 'pki'}",
        f"--hostname-override={name}",
        f"--node-ip={address}",
        "--v=2",  # for the line that says the kernel tunables are set
    ]


def kube_proxy_argv(kubeconfig: Path, name: str, address: str) -> list[str]:
    """A node's kube-proxy in iptables mode, serving its health and metrics on loopback."""
    return [
        str(node_binary("kube-proxy")),
        f"--kubeconfig={kubeconfig}",
        "--proxy-mode=iptables",
        f"--hostname-override={name}",
        f"--cluster-cidr={CLUSTER_CIDR}",
        f"--bind-address={address}",
        f"--nodeport-addresses={address}/32",
        "--healthz-bind-address=127.0.0.1:10256",
        "--metrics-bind-address=127.0.0.1:10249",
        # Leave the host's conntrack settings alone.
        "--conntrack-max-per-core=0",
        "--conntrack-tcp-timeout-established=0",
        "--conntrack-tcp-timeout-close-wait=0",
        "--v=1",
    ]


def ctr(socket: Path, *args: str, check: bool = True, timeout: float = 600):
    """`ctr` against the containerd at `socket`, in Kubernetes' namespace."""
    argv = [str(containerd_binary("ctr")), "--address", str(socket), "-n", "k8s.io", *args]
    return _run(*argv, check=check, timeout=timeout)


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
        _log(f"importing {archive.name} into containerd ({store.name})")
        ctr(socket, "images", "import", "--snapshotter", "overlayfs", "--no-unpack", str(archive))
        done.add(str(archive))
        record.write_text(json.dumps(sorted(done)))


def pause_archive(directory: Path) -> Path:
    """The sandbox image, as a docker archive: Kubernetes' own pause.c, built static.

    No registry is reachable, so the image containerd puts every pod's network namespace in
    is made here from the Go module the control plane is built from.
    """
    out = directory / "pause.tar"
    if out.exists():
        return out
    directory.mkdir(parents=True, exist_ok=True)
    source = kubernetes_source("build/pause/linux/pause.c")
    (directory / "pause.c").write_bytes(source.read_bytes())
    binary = directory / "pause"
    _run("gcc", "-Os", "-static", "-DVERSION=v3.10.2-tfjob", "-o", str(binary),
         str(directory / "pause.c"))  # fmt: skip
    _run("strip", str(binary))
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tar.gettarinfo(str(binary), arcname="pause")
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        with binary.open("rb") as f:
            tar.addfile(info, f)
    layer_bytes = layer.getvalue()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {
            "type": "layers",
            "diff_ids": ["sha256:" + hashlib.sha256(layer_bytes).hexdigest()],
        },
    }
    config_bytes = json.dumps(config).encode()
    manifest = [{"Config": "config.json", "RepoTags": [PAUSE_IMAGE], "Layers": ["layer.tar"]}]
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, mode="w") as tar:
        for name, data in (
            ("layer.tar", layer_bytes),
            ("config.json", config_bytes),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    tmp.rename(out)
    return out


class Node:
    """The control plane plus one real node, started by `up` and stopped by `down`; `second()`
    adds a second node (`second_node.SecondNode`) to it."""

    def __init__(self, directory: Path | None = None) -> None:
        self.dir = (directory or state_dir()).absolute()
        self.store = cache_dir() / "containerd"  # images persist: imported once
        self.plane = ControlPlane(self.dir / "plane", address=NODE_IP, node=True)
        self.kubeconfig = self.dir / "kubeconfig"
        self.volumes = self.dir / "volumes"
        self.timings: dict[str, float] = {}
        # Every archive imported into node 1, in order: a second node gets the same.
        self.archives: list[Path] = []
        self._second: SecondNode | None = None

    @property
    def socket(self) -> Path:
        return self.dir / "containerd" / "containerd.sock"

    # -- bring-up ---------------------------------------------------------------------------

    def up(self, archives: list[Path], timeout: float = 300) -> Node:
        """Start everything; import `archives` (docker archives) into containerd."""
        reason = missing_prerequisites()
        if reason:
            raise NodeError(reason)
        if (self.dir / "host.json").exists():
            _log(f"a previous node left state in {self.dir}: tearing it down first")
            teardown(self.dir)
        started = time.monotonic()
        deadline = started + timeout
        _run("bash", str(HOST_PACKAGES), timeout=900)
        ensure(CONTAINERD)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._record_host()
        try:
            self._network()
            self._step(
                "control plane", lambda: self.plane.start(timeout=deadline - time.monotonic())
            )
            shutil.copy(self.plane.kubeconfig, self.kubeconfig)
            self._step("containerd", self._containerd)
            self._step(
                "images",
                lambda: self.import_images([pause_archive(self.store / "pause"), *archives]),
            )
            self._step("kubelet", lambda: self._kubelet(deadline))
            self._step("kube-proxy", lambda: self._kube_proxy(deadline))
            self._step("dns and volumes", lambda: self._services(deadline))
        except BaseException:
            self.down()
            raise
        self.timings["total"] = time.monotonic() - started
        return self

    def _step(self, what: str, action: Any) -> None:
        t0 = time.monotonic()
        action()
        self.timings[what] = time.monotonic() - t0
        self._save_pids()
        _log(f"{what}: {self.timings[what]:.1f} s")

    def _record_host(self) -> None:
        """What the host was before anything changed, for `teardown`."""
        host = {
            "sysctls": read_sysctls(),
            "chains": sorted(iptables_chains()),
            "fixed_paths": [p for p in FIXED_PATHS if os.path.lexists(p)],
            # `ip netns add` (the second node) makes /run/netns a mount point of its own.
            "netns_mounted": _is_mount_point(NETNS_DIR),
        }
        (self.dir / "host.json").write_text(json.dumps(host, indent=1))

    def _save_pids(self) -> None:
        (self.dir / "pids.json").write_text(json.dumps(self.plane.processes()))

    def _network(self) -> None:
        if _run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
            _run("ip", "link", "add", BRIDGE, "type", "bridge")
            _run("ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        # The cluster's range ends here: a node that is down or cut off (its route gone with its
        # link) is unreachable at once, and no pod's packet to it leaves by the default route.
        _run("ip", "route", "replace", "unreachable", CLUSTER_CIDR)
        cni = self.dir / "cni"
        (cni / "net.d").mkdir(parents=True, exist_ok=True)
        conf = cni_conflist(BRIDGE, POD_CIDR, NODE_IP, cni / "ipam")
        (cni / "net.d" / "10-tfjob.conflist").write_text(json.dumps(conf, indent=1))

    def _containerd(self) -> None:
        d = self.dir / "containerd"
        d.mkdir(parents=True, exist_ok=True)
        self.store.mkdir(parents=True, exist_ok=True)
        config = containerd_config(self.store / "root", d, self.socket, self.dir / "cni" / "net.d")
        (d / "config.toml").write_text(config)
        self.plane.spawn(
            "containerd",
            [str(containerd_binary("containerd")), "--config", str(d / "config.toml")],
            env=containerd_env(),
        )
        self._until(
            time.monotonic() + 30,
            "containerd",
            lambda: self._ctr("version", check=False).returncode == 0,
        )

    def _ctr(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        return ctr(self.socket, *args, check=check, timeout=timeout)

    def import_images(self, archives: list[Path]) -> None:
        """Import each archive once (a record in the store names what it already holds); a
        second node, if one runs, gets it too, and so does any brought up later."""
        import_images(self.socket, self.store, archives)
        self.archives += [a for a in archives if a not in self.archives]
        if self._second is not None and self._second.state == "up":
            self._second.import_images(archives)

    def _kubelet(self, deadline: float) -> None:
        d = self.dir / "kubelet"
        d.mkdir(parents=True, exist_ok=True)
        (d / "resolv.conf").write_text(f"nameserver {NODE_IP}\n")
        config = kubelet_config(d, NODE_IP, self.plane.workdir / "pki", self.socket)
        (d / "config.yaml").write_text(json.dumps(config, indent=1))
        env = dict(os.environ, AWS_EC2_METADATA_DISABLED="true")  # no cloud metadata probe
        self.plane.spawn(
            "kubelet",
            kubelet_argv(d, self.kubeconfig, NODE_NAME, NODE_IP),
            env=env,
        )
        log = self.plane.workdir / "kubelet.log"
        # kubelet sets its kernel tunables once at start and never looks again: once it has
        # (the device plugin manager starts right after), the host's values go back.
        self._until(
            deadline,
            "kubelet start",
            lambda: "Starting Device Plugin manager" in log.read_text(errors="replace"),
        )
        _restore_sysctls(self._host()["sysctls"], KUBELET_SYSCTLS)
        self._until(deadline, f"node {NODE_NAME} Ready", self._node_ready)
        self.advertise_gpus(NODE_NAME, deadline)

    def advertise_gpus(self, name: str, deadline: float) -> None:
        """Give node `name` GPUS nvidia.com/gpu of capacity, as a device plugin would."""
        self._api(
            "PATCH",
            f"/api/v1/nodes/{name}/status",
            {"status": {"capacity": {"nvidia.com/gpu": str(GPUS)}}},
        )
        self._until(
            deadline,
            f"nvidia.com/gpu allocatable on {name}",
            lambda: (
                (self._api("GET", f"/api/v1/nodes/{name}") or {})
                .get("status", {})
                .get("allocatable", {})
                .get("nvidia.com/gpu")
                == str(GPUS)
            ),
        )

    def _kube_proxy(self, deadline: float) -> None:
        before = set(self._host()["chains"])
        self.plane.spawn("kube-proxy", kube_proxy_argv(self.kubeconfig, NODE_NAME, NODE_IP))
        self._until(
            deadline,
            "kube-proxy rules for the kubernetes Service",
            lambda: (
                "nat/KUBE-SERVICES" in iptables_chains() - before
                and "default/kubernetes" in _run("iptables-save", "-t", "nat").stdout
            ),
        )

    def _services(self, deadline: float) -> None:
        dns = self.dir / "dns"
        dns.mkdir(parents=True, exist_ok=True)
        self.volumes.mkdir(parents=True, exist_ok=True)
        hosts = dns / "cluster.hosts"
        hosts.touch()
        hosts.chmod(0o644)
        self.plane.spawn(
            "dnsmasq",
            [
                "/usr/sbin/dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null",
                "--no-resolv", "--no-hosts", "--no-poll", f"--listen-address={NODE_IP}",
                "--bind-interfaces", "--port=53", f"--hostsdir={dns}",
                f"--local=/{CLUSTER_DOMAIN}/", "--domain-needed", "--local-ttl=1",
                f"--pid-file={dns / 'dnsmasq.pid'}", "--log-facility=-",
            ],
        )  # fmt: skip
        self.plane.spawn(
            "nodeservices",
            [
                sys.executable, "-m", "tfjob_testbed.nodeservices",
                f"--kubeconfig={self.kubeconfig}", f"--hosts-file={hosts}",
                f"--volumes-dir={self.volumes}", f"--cluster-domain={CLUSTER_DOMAIN}",
                # Like kind's local-path: a volume is made on the node its first pod runs on
                # and pinned there; `shared` is the NFS-like class both nodes see.
                "--binding-mode=WaitForFirstConsumer", f"--shared-class={SHARED_STORAGE_CLASS}",
            ],
        )  # fmt: skip
        log = self.plane.workdir / "nodeservices.log"
        self._until(
            deadline,
            "DNS and volume service",
            lambda: "volumes: checked" in log.read_text(errors="replace"),
        )

    # -- faults -----------------------------------------------------------------------------

    def outage(self, name: str, until: Any, timeout: float = 300) -> None:
        """Stop one of the node's processes (kube-apiserver, kubelet, containerd, ...), wait
        until `until()` holds, start it again as it was, and return once it serves again."""
        self.plane.stop_process(name)
        try:
            deadline = time.monotonic() + timeout
            while not until():  # not _until: that fails on the process stopped here
                if time.monotonic() > deadline:
                    raise NodeError(f"timed out waiting for the end of the {name} outage")
                time.sleep(0.2)
        finally:
            self.plane.start_process(name)
            self._save_pids()
        deadline = time.monotonic() + timeout
        if name == "kubelet":
            log = self.plane.workdir / "kubelet.log"
            self._until(
                deadline,
                "kubelet start",
                lambda: "Starting Device Plugin manager" in log.read_text(errors="replace"),
            )
            _restore_sysctls(self._host()["sysctls"], KUBELET_SYSCTLS)  # it set them again
        elif name == "containerd":
            self._until(
                deadline, "containerd", lambda: self._ctr("version", check=False).returncode == 0
            )
        self._until(deadline, f"node {NODE_NAME} Ready after the {name} outage", self._node_ready)

    def kill_container(self, container_id: str) -> None:
        """SIGKILL a container's process through containerd, as the kernel's OOM killer or a
        crash would end it: `container_id` is a pod's `containerd://...` containerID."""
        self._ctr(
            "tasks", "kill", "--signal", "SIGKILL", container_id.removeprefix("containerd://")
        )

    @staticmethod
    def container_log(namespace: str, pod: str, container: str = "tensorflow") -> str:
        """The messages of a container's newest run, read from kubelet's log files on the host:
        readable while the API server is down."""
        return read_container_log(Path("/var/log/pods"), namespace, pod, container)

    # -- helpers ----------------------------------------------------------------------------

    def _host(self) -> dict[str, Any]:
        return json.loads((self.dir / "host.json").read_text())

    def _api(self, method: str, path: str, body: Any = None) -> Any:
        args = ["--kubeconfig", str(self.kubeconfig)]
        kubectl = _kubectl()
        if method == "GET":
            proc = _run(kubectl, *args, "get", "--raw", path, check=False)
            return json.loads(proc.stdout) if proc.returncode == 0 else None
        kind, name = path.split("/")[-3], path.split("/")[-2]
        assert (kind, path.endswith("/status")) == ("nodes", True)
        _run(kubectl, *args, "patch", "node", name, "--subresource=status", "--type=merge",
             "-p", json.dumps(body))  # fmt: skip
        return None

    def _node_ready(self, name: str = NODE_NAME) -> bool:
        node = self._api("GET", f"/api/v1/nodes/{name}") or {}
        conds = node.get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    def _until(self, deadline: float, what: str, check: Any) -> None:
        delay = 0.05
        while not check():
            for name, pid in self.plane.processes().items():
                if not alive(pid):
                    log = self.plane.workdir / f"{name}.log"
                    raise NodeError(f"{name} exited while waiting for {what}\n{log_tail(log)}")
            if time.monotonic() > deadline:
                raise NodeError(f"timed out waiting for {what}")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.5)

    # -- teardown ---------------------------------------------------------------------------

    def second(self, timeout: float = 600) -> SecondNode:
        """A healthy second node (`second_node.SecondNode`): the one running if it is, else a
        fresh one, after tearing down one that was killed, partitioned or broken (its Node
        object and the pods bound to it deleted from the API too)."""
        from tfjob_testbed import second_node

        if self._second is not None:
            if self._second.healthy():
                return self._second
            _log(f"{self._second.name} is {self._second.state}: replacing it")
            self._second.remove()
            self._second = None
        elif (self.dir / second_node.SUBDIR).exists():
            second_node.teardown(self.dir)
        second = second_node.SecondNode(self)
        self._second = second
        second.up(timeout)
        return second

    def down(self) -> None:
        """Delete the pods while kubelet still runs (so their networks and mounts go the
        proper way), stop every process, then put the host back."""
        if self._second is not None and self._second.state != "up":
            with contextlib.suppress(Exception):  # a dead node's pods never go: not waited for
                self._second.remove()
        self._second = None
        if self.plane.processes():
            with contextlib.suppress(Exception):
                _drain(self.kubeconfig)
            self.plane.stop()
        teardown(self.dir)


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


def _kubectl() -> str:
    return str(ensure_tools().kubectl)


def _archive_tags(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("manifest.json")
        assert member is not None
        return [t for entry in json.load(member) for t in entry.get("RepoTags") or []]


def _drain(kubeconfig: Path, timeout: float = 60) -> None:
    """Delete every workload and pod, and wait (bounded) for the pods to be gone."""
    kubectl = [_kubectl(), "--kubeconfig", str(kubeconfig), "--request-timeout=10s"]
    _run(*kubectl, "delete", "tfjobs,deployments,statefulsets,replicasets,daemonsets,jobs",
         "--all", "-A", "--wait=false", check=False)  # fmt: skip
    _run(*kubectl, "delete", "pods", "--all", "-A", "--grace-period=1", "--wait=false", check=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = _run(*kubectl, "get", "pods", "-A", "-o", "name", check=False)
        if proc.returncode != 0 or not proc.stdout.strip():
            break
        time.sleep(0.5)
    while time.monotonic() < deadline and list(Path("/run/netns").glob("cni-*")):
        time.sleep(0.2)


def _our_shims(socket_path: Path) -> list[int]:
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


def _is_mount_point(path: str) -> bool:
    """Whether something is mounted on `path` (a bind mount of a directory on itself too, which
    os.path.ismount cannot tell)."""
    return any(
        line.split()[1].encode().decode("unicode_escape") == path
        for line in Path("/proc/mounts").read_text().splitlines()
    )


def _mounts_under(prefixes: list[str]) -> list[str]:
    mounts = []
    for line in Path("/proc/mounts").read_text().splitlines():
        point = line.split()[1].encode().decode("unicode_escape")
        if any(point == p or point.startswith(p.rstrip("/") + "/") for p in prefixes):
            mounts.append(point)
    return sorted(set(mounts), key=len, reverse=True)


def cgroup_tops(root: str) -> list[Path]:
    """The top cgroup `root` in every hierarchy (v1 and the unified one), each once (cgroup v1
    mounts some hierarchies under two names: cpu and cpuacct are links to cpu,cpuacct)."""
    return sorted({p.resolve() for p in Path("/sys/fs/cgroup").glob(f"*/{root}") if p.is_dir()})


def kill_pods_of(socket_path: Path, root: str, timeout: float = 30) -> None:
    """SIGKILL a node's shims and every process in its pods' cgroups (under `root`) until none
    is left: after a crash of the bed its containers may outlive their shims."""
    deadline = time.monotonic() + timeout
    while True:
        pids = set(_our_shims(socket_path))
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


def leftovers(directory: Path | None = None) -> list[str]:
    """What of a node (and of a second node) is still on the host: empty once `teardown` has
    run."""
    from tfjob_testbed import second_node

    d = (directory or state_dir()).absolute()
    found = []
    pids_file = d / "pids.json"
    if pids_file.exists():
        for name, pid in json.loads(pids_file.read_text()).items():
            if alive(pid):
                found.append(f"process {name} ({pid})")
    found += [f"shim {p}" for p in _our_shims(d / "containerd" / "containerd.sock")]
    if _run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
        found.append(f"interface {BRIDGE}")
    if _run("ip", "route", "show", "type", "unreachable", CLUSTER_CIDR).stdout.strip():
        found.append(f"route unreachable {CLUSTER_CIDR}")
    found += [f"netns {p.name}" for p in Path("/run/netns").glob("cni-*")]
    found += [
        f"mount {m}" for m in _mounts_under([str(d), str(cache_dir() / "containerd"), *FIXED_PATHS])
    ]
    found += [f"iptables {c}" for c in sorted(iptables_chains()) if "/KUBE-" in c]
    found += [f"cgroup {c}" for c in sorted(map(str, Path("/sys/fs/cgroup").glob("*/kubepods")))]
    found += second_node.leftovers(d)
    return found


def teardown(directory: Path | None = None) -> None:
    """Put the host back from the records a node left: safe to run twice, or with no node."""
    from tfjob_testbed import second_node

    d = (directory or state_dir()).absolute()
    host_file = d / "host.json"
    host = json.loads(host_file.read_text()) if host_file.exists() else None
    pids_file = d / "pids.json"
    pids = json.loads(pids_file.read_text()) if pids_file.exists() else {}
    for name in reversed(list(pids)):
        terminate(pids[name], 10, exe=EXES.get(name, name))
    second_node.teardown(d)
    kill_pods_of(d / "containerd" / "containerd.sock", "kubepods")
    # The binary as built, if it is: a teardown never starts a build.
    kube_proxy = KUBERNETES.path("kube-proxy")
    if kube_proxy.exists():
        _run(str(kube_proxy), "--cleanup", "--proxy-mode=iptables", check=False)
    before = set(host["chains"]) if host else set()
    remove_chains(sorted(c for c in iptables_chains() - before if "/KUBE-" in c))
    # A namespace its last user has just left may hold on to them for a moment: retried.
    deadline = time.monotonic() + 10
    while (netns := list(Path(NETNS_DIR).glob("cni-*"))) and time.monotonic() < deadline:
        for ns in netns:
            _run("ip", "netns", "delete", ns.name, check=False)
        time.sleep(0.1)
    _run("ip", "link", "delete", BRIDGE, check=False)
    _run("ip", "route", "delete", "unreachable", CLUSTER_CIDR, check=False)
    for mount in _mounts_under([str(d), str(cache_dir() / "containerd"), *FIXED_PATHS]):
        _run("umount", "-l", mount, check=False)
    for top in cgroup_tops("kubepods"):
        with contextlib.suppress(FileNotFoundError):
            subs = [p for p in top.rglob("*") if p.is_dir()]
            for sub in sorted(subs, key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    sub.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()
    if host is not None:
        if not host.get("netns_mounted", True) and _is_mount_point(NETNS_DIR):
            _run("umount", NETNS_DIR, check=False)
        _restore_sysctls(host["sysctls"])
        for path in FIXED_PATHS:
            if path not in host["fixed_paths"]:
                shutil.rmtree(path, ignore_errors=True)
    logs = d / "logs"  # kept, for a look after a failure: the next teardown replaces them
    if (d / "plane").is_dir():
        shutil.rmtree(logs, ignore_errors=True)
        logs.mkdir(parents=True)
        for log in (d / "plane").glob("*.log"):
            shutil.copy(log, logs / log.name)
    for sub in ("plane", "containerd", "kubelet", "cni", "dns", "volumes", "pids.json"):
        target = d / sub
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)
    host_file.unlink(missing_ok=True)
