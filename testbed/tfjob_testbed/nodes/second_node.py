"""A second real node, `tfjob-node-2`, that joins the running bed of `node.py` on the same host:
its own containerd, kubelet, kube-proxy, pod range and node name, the same images, the same
control plane, cluster DNS and volumes. `Node.second()` brings one up.

Why it is built this way:

- A node has an address, pods and iptables rules of its own: node 2 lives in a network namespace
  (`tfjob-node2`, in /run/netns like `ip netns add`'s, but made without its side effect on
  /run/netns: see `_network`) behind a veth pair (host `tfjob-n2` 10.244.254.1/30, inside `eth0`
  10.244.254.2/30), with its own bridge holding its node IP 10.244.1.1/24 (its pods get
  10.244.1.0/24). The host routes 10.244.1.0/24 to it; it routes the rest of 10.244.0.0/16
  (node 1's pods, the cluster DNS and the API server on 10.244.0.1) to the host. Its
  kube-proxy runs in there and writes only that namespace's iptables.
- kubelet and containerd write fixed paths whatever their configured roots
  (`nodeconfig.FIXED_PATHS`: the device-plugin and pod-resources sockets, CNI caches, shim
  sockets), containerd keeps its pods' network namespaces in /run/netns, and kubelet removes
  the /var/log/pods directories of pods it does not know: two kubelets sharing them would
  delete each other's logs. So node 2 runs in a mount namespace of its own, in which private
  directories (under its state dir) are bind-mounted over those paths. The namespace is bound
  to a file in the state dir, so it outlives its processes and teardown finds it.
- kubelet-2's `cgroupRoot` is /tfjob-node-2: its pods' cgroups never mix with node 1's, and a
  kill finds every process of its pods there.
- containerd locks its root, so node 2 has an image store of its own in the cache
  (`containerd-2`), imported once, from the same archives node 1 got.
- Its processes are started through node 1's `ControlPlane.spawn` (`nsenter` into both
  namespaces; nsenter execs, so the recorded PID is the binary's): they are in pids.json, stop
  with the plane, and `node.teardown` puts the host back from the records alone, after a crash
  too.
- It is a `realnode.RealNode`, as node 1 is: the same containerd, kubelet, kube-proxy and CNI
  configuration (`nodeconfig.py`), with its own names, addresses, cgroup root and namespaces.
  It joins node 1 (`FirstNode`: its state dir, control plane, kubeconfig and images) without
  importing it.

Faults, for chaos tests: `kill()` (the machine dies: every process gone, its link down, its Node
object left in the API to go NotReady), `partition()` and `heal()` (its link down and up again,
its processes running on).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import time
from pathlib import Path
from typing import Protocol

from tfjob_testbed.controlplane.plane import ControlPlane
from tfjob_testbed.core.paths import cache_dir
from tfjob_testbed.core.procs import alive, terminate
from tfjob_testbed.nodes.host import cgroup_tops, mounts_under, run, sysctl_path
from tfjob_testbed.nodes.nodeconfig import BRIDGE, CLUSTER_CIDR, FIXED_PATHS, NETNS_DIR, bridge_mac
from tfjob_testbed.nodes.realnode import RealNode, kill_pods_of, kubectl_path, shims_of

NAME = "tfjob-node-2"
SUBDIR = "node-2"  # its state, under node 1's state dir
NETNS = "tfjob-node2"
HOST_VETH = "tfjob-n2"
HOST_VETH_IP = "10.244.254.1"
PEER_VETH_IP = "10.244.254.2"
VETH_PREFIX = 30
NODE_IP = "10.244.1.1"
POD_CIDR = "10.244.1.0/24"
CGROUP_ROOT = "tfjob-node-2"
PROCESSES = ("containerd-2", "kubelet-2", "kube-proxy-2")  # in start order
# Process name -> what its /proc/PID/exe must end with (in node.EXES too): nsenter execs them, so
# the PID is the binary's.
EXES = {"containerd-2": "containerd", "kubelet-2": "kubelet", "kube-proxy-2": "kube-proxy"}
NSENTER = "/usr/bin/nsenter"
CGROUP_FS = Path("/sys/fs/cgroup")
# What its mount namespace hides from node 1 (and node 1's from it): fixed path -> private dir.
PRIVATE = {
    **{p: p.strip("/").replace("/", "-") for p in FIXED_PATHS},
    NETNS_DIR: "run-netns",
}
READY_WAIT = 60  # a running node 2 that is not Ready within this is replaced


def store() -> Path:
    """Its containerd's image store: in the cache, like node 1's, so images are imported once."""
    return cache_dir() / "containerd-2"


def netns_path() -> Path:
    return Path(NETNS_DIR) / NETNS


class FirstNode(Protocol):
    """What a second node joins (`node.Node`): node 1's state dir (with the records: host.json,
    pids.json; the second node's under it), its control plane (which runs the second node's
    processes too), its kubeconfig and the archives it imported."""

    dir: Path
    plane: ControlPlane
    kubeconfig: Path
    archives: list[Path]


class SecondNode(RealNode):
    """Node 2 of the bed: `up` (through `Node.second()`), faults, its logs, `remove`.

    `state`: "new", "up", "partitioned", "killed" or "removed".
    """

    name = NAME
    address = NODE_IP
    pod_cidr = POD_CIDR
    suffix = "-2"  # containerd-2, kubelet-2, kube-proxy-2 (PROCESSES)
    label = NAME
    cgroup_root = CGROUP_ROOT

    def __init__(self, node: FirstNode) -> None:
        super().__init__(
            node.dir / SUBDIR,
            bed=node.dir,
            plane=node.plane,
            kubeconfig=node.kubeconfig,
            store=store(),
        )
        self.node = node
        self.state = "new"

    @property
    def mount_ns(self) -> Path:
        return self.dir / "ns" / "mnt"

    @property
    def pod_logs(self) -> Path:
        """Its /var/log/pods, as the host sees it."""
        return self.dir / "private" / PRIVATE["/var/log/pods"]

    # -- bring-up ---------------------------------------------------------------------------

    def up(self, timeout: float = 600) -> SecondNode:
        """Start it and return once it is Ready with its GPUs advertised and kube-proxy's rules
        written; on failure everything of it is removed again."""
        self.check_room(self.node.archives)
        started = time.monotonic()
        deadline = started + timeout
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self.step("cgroups", self.make_cgroup_root)
            self.step("network", self._network)
            self.step("mount namespace", self._mount_namespace)
            self.step("containerd", lambda: self.start_containerd(deadline))
            self.step("images", lambda: self.import_images(self.node.archives))
            self.step("kubelet", lambda: self.start_kubelet(deadline))
            self.step("kube-proxy", lambda: self._kube_proxy(deadline))
        except BaseException:
            with contextlib.suppress(Exception):
                self.remove()
            raise
        self.state = "up"
        self.timings["total"] = time.monotonic() - started
        self.log(f"up in {self.timings['total']:.1f} s")
        return self

    def _network(self) -> None:
        # What `ip netns add` does, but for one step: that also bind-mounts /run/netns on itself
        # (recursively, to share it), which leaves node 1's pod namespaces mounted twice, one of
        # them hidden, so containerd can never remove them again (EBUSY).
        Path(NETNS_DIR).mkdir(exist_ok=True)
        netns_path().touch()
        run("unshare", f"--net={netns_path()}", "true")
        run("ip", "link", "add", HOST_VETH, "type", "veth", "peer", "name", "eth0",
            "netns", NETNS)  # fmt: skip
        run("ip", "addr", "add", f"{HOST_VETH_IP}/{VETH_PREFIX}", "dev", HOST_VETH)
        run("ip", "link", "set", HOST_VETH, "up")
        inside = ("ip", "-n", NETNS)
        run(*inside, "link", "set", "lo", "up")
        run(*inside, "addr", "add", f"{PEER_VETH_IP}/{VETH_PREFIX}", "dev", "eth0")
        run(*inside, "link", "set", "eth0", "up")
        run(*inside, "link", "add", BRIDGE, "address", bridge_mac(NODE_IP), "type", "bridge")
        run(*inside, "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
        run(*inside, "link", "set", BRIDGE, "up")
        self._routes()
        # It routes between its pods and the host; the host between it and node 1's pods
        # (ip_forward is in nodeconfig.SYSCTLS: node 1's teardown restores it).
        run(NSENTER, f"--net={netns_path()}", "sysctl", "-qw", "net.ipv4.ip_forward=1")
        sysctl_path("net.ipv4.ip_forward").write_text("1\n")
        self.write_cni_config()

    @staticmethod
    def _routes() -> None:
        """Its pods via its veth; from inside, the rest of the cluster's range via the host
        (the connected /24 of its own pods is more specific)."""
        run("ip", "route", "replace", POD_CIDR, "via", PEER_VETH_IP, "dev", HOST_VETH)
        run("ip", "-n", NETNS, "route", "replace", CLUSTER_CIDR,
            "via", HOST_VETH_IP, "dev", "eth0")  # fmt: skip

    def _mount_namespace(self) -> None:
        """A persistent mount namespace (bound to a file on a private mount, as the kernel
        requires), in which private dirs cover the fixed paths."""
        ns_dir = self.mount_ns.parent
        ns_dir.mkdir(parents=True, exist_ok=True)
        run("mount", "--bind", str(ns_dir), str(ns_dir))
        run("mount", "--make-private", str(ns_dir))
        self.mount_ns.touch()
        # The new namespace starts as a copy of the host's mounts, node 1's among them (its
        # pods' network namespaces, volumes and root filesystems): a copy kept here would make
        # node 1's kubelet and containerd fail to remove them (EBUSY). Detached here, deepest
        # first, before the private dirs go over the fixed paths.
        node1 = [str(self.bed), *FIXED_PATHS, NETNS_DIR]
        pattern = "|".join(p.replace(".", "\\.") for p in node1)  # paths: [a-z0-9/._-]
        script = [
            f"awk '{{print $2}}' /proc/self/mounts | grep -E '^({pattern})(/|$)' | sort -r |",
            '  while read -r m; do umount -l "$m" 2>/dev/null || true; done',
            "set -e",
        ]
        for target, private in PRIVATE.items():
            source = self.dir / "private" / private
            source.mkdir(parents=True, exist_ok=True)
            script.append(f"mkdir -p {target} && mount --bind {source} {target}")
        run("unshare", f"--mount={self.mount_ns}", "--propagation", "private",
            "sh", "-c", "\n".join(script))  # fmt: skip

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        """Start one of its processes, as a process of node 1's plane, in its mount and network
        namespaces (nsenter execs: the PID recorded is the binary's)."""
        enter = [NSENTER, f"--mount={self.mount_ns}", f"--net={netns_path()}", "--"]
        self.plane.spawn(name, [*enter, *argv], env=env)

    def _kube_proxy(self, deadline: float) -> None:
        # Its health and metrics ports are on its own namespace's loopback.
        self.start_kube_proxy(deadline, lambda: "default/kubernetes" in self._iptables_nat())

    @staticmethod
    def _iptables_nat() -> str:
        proc = run(NSENTER, f"--net={netns_path()}", "iptables-save", "-t", "nat",
                   check=False)  # fmt: skip
        return proc.stdout

    # -- state ------------------------------------------------------------------------------

    def healthy(self) -> bool:
        """Up (not killed, partitioned or removed), its processes alive and its Node Ready
        (waited for a while: it may just have been healed)."""
        if self.state != "up":
            return False
        procs = self.plane.processes()
        if not all(name in procs and alive(procs[name]) for name in PROCESSES):
            return False
        deadline = time.monotonic() + READY_WAIT
        while not self.node_ready():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.5)
        return True

    # -- faults -----------------------------------------------------------------------------

    def kill(self) -> None:
        """The machine dies for good: its link goes down (a dead machine answers nothing), and
        kubelet-2, kube-proxy-2, containerd-2, its shims and every process of its pods are
        SIGKILLed. Its Node object stays in the API, to go NotReady (Unknown) as a dead node's
        does; `Node.second()` replaces it with a fresh node."""
        self.state = "killed"
        run("ip", "link", "set", HOST_VETH, "down")
        self._forget(signal.SIGKILL)
        self.save_pids()
        _kill_everything_of(self.dir)
        self.log("killed")

    def partition(self) -> None:
        """Cut it off from the host, the control plane and node 1 (its link down); its
        kubelet, kube-proxy and pods keep running."""
        run("ip", "link", "set", HOST_VETH, "down")
        self.state = "partitioned"
        self.log("partitioned")

    def heal(self, timeout: float = 120) -> None:
        """End a partition: the link up and the routes back; returns once it is Ready."""
        run("ip", "link", "set", HOST_VETH, "up")
        self._routes()  # the host's went with the link
        self.state = "up"
        self.until(
            time.monotonic() + timeout,
            f"node {NAME} Ready after the partition",
            self.node_ready,
        )
        self.log("healed")

    # -- teardown ---------------------------------------------------------------------------

    def remove(self) -> None:
        """Tear it down completely, whatever its state: its processes, namespaces, veth,
        cgroups and state, its Node object, and (force-deleted) the pods still bound to it."""
        self._forget(signal.SIGKILL)
        self.save_pids()
        teardown(self.bed)
        kubectl = [kubectl_path(), "--kubeconfig", str(self.kubeconfig),
                   "--request-timeout=20s"]  # fmt: skip
        # The Node first: the scheduler binds nothing more to it, then its pods go.
        run(*kubectl, "delete", "node", NAME, "--ignore-not-found", "--wait=false",
            check=False)  # fmt: skip
        run(*kubectl, "delete", "pods", "-A", f"--field-selector=spec.nodeName={NAME}",
            "--force", "--grace-period=0", check=False)  # fmt: skip
        deadline = time.monotonic() + 30
        while self.api("GET", f"/api/v1/nodes/{NAME}") and time.monotonic() < deadline:
            time.sleep(0.2)
        self.state = "removed"
        self.log("removed")

    def _forget(self, sig: signal.Signals) -> None:
        """Its processes signalled and dropped from the plane: they never come back (a later
        node 2 starts new ones)."""
        self.plane.forget(PROCESSES, sig)


def _cgroup_tops() -> list[Path]:
    """Its cgroups' top in every hierarchy (v1 and the unified one), each once."""
    return cgroup_tops(CGROUP_ROOT)


def _kill_everything_of(d2: Path) -> None:
    """SIGKILL its shims and every process in its cgroups (its pods'), until none is left."""
    kill_pods_of(d2 / "containerd" / "containerd.sock", CGROUP_ROOT)


def leftovers(directory: Path) -> list[str]:
    """What of a second node is still on the host (its processes are in node 1's pids.json)."""
    d2 = directory.absolute() / SUBDIR
    found = [f"shim {p}" for p in shims_of(d2 / "containerd" / "containerd.sock")]
    if netns_path().exists():
        found.append(f"netns {NETNS}")
    if run("ip", "link", "show", HOST_VETH, check=False).returncode == 0:
        found.append(f"interface {HOST_VETH}")
    found += [f"mount {m}" for m in mounts_under([str(d2), str(store())])]
    found += [f"cgroup {c}" for c in sorted(map(str, CGROUP_FS.glob(f"*/{CGROUP_ROOT}")))]
    if d2.exists():
        found.append(f"state {d2}")
    return found


def teardown(directory: Path) -> None:
    """Remove a second node from the records on disk alone (node 1's pids.json, the fixed
    names and paths here): safe to run twice, or with none."""
    d = directory.absolute()
    d2 = d / SUBDIR
    pids_file = d / "pids.json"
    pids = json.loads(pids_file.read_text()) if pids_file.exists() else {}
    for name in reversed(PROCESSES):
        if name in pids:
            terminate(pids[name], 10, exe=EXES[name])
    _kill_everything_of(d2)
    # Its mount namespace goes with the last mount of it (its processes are gone), and with it
    # every mount made in there (volumes, rootfs, pod network namespaces).
    for mount in mounts_under([str(d2), str(store())]):
        run("umount", "-l", mount, check=False)
    run("ip", "link", "delete", HOST_VETH, check=False)  # the route goes with it
    if netns_path().exists():
        run("ip", "netns", "delete", NETNS, check=False)
    deadline = time.monotonic() + 20
    for top in _cgroup_tops():
        subs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for cgroup in [*subs, top]:
            while True:  # a SIGKILLed process leaves its cgroup a moment later
                try:
                    cgroup.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.1)
    shutil.rmtree(d2, ignore_errors=True)
