"""A real Kubernetes node on this host: containerd + runc, kubelet, kube-proxy, a CNI bridge,
cluster DNS and volumes, beside the control plane of `controlplane/plane.py`. `Node` is node 1
of the bed, made, like the second node (`second_node.py`), from `realnode.RealNode`, configured
as `nodeconfig.py` says.

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
- kernel settings kubelet, kube-proxy and the bridge plugin change (`nodeconfig.SYSCTLS`).

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
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from tfjob_testbed.controlplane.plane import ControlPlane
from tfjob_testbed.core.gobuild import CONTAINERD, KUBERNETES, ensure, module_source
from tfjob_testbed.core.paths import cache_dir
from tfjob_testbed.core.pause import compile_pause
from tfjob_testbed.core.procs import alive, terminate
from tfjob_testbed.nodes import second_node
from tfjob_testbed.nodes.host import NodeError, cgroup_tops, is_mount_point, mounts_under, run

# Shared with the second node.
from tfjob_testbed.nodes.nodeconfig import (
    BRIDGE,
    CLUSTER_CIDR,
    CLUSTER_DNS,
    CLUSTER_DOMAIN,
    FIXED_PATHS,
    KUBELET_SYSCTLS,
    NETNS_DIR,
    PAUSE_IMAGE,
    bridge_mac,
)
from tfjob_testbed.nodes.realnode import (
    RealNode,
    kill_pods_of,
    kubectl_path,
    read_sysctls,
    restore_sysctls,
    shims_of,
)

HOST_PACKAGES = Path(__file__).with_name("host-packages.sh")
NODE_IP = CLUSTER_DNS  # its bridge's address: the cluster DNS listens here
POD_CIDR = "10.244.0.0/24"
NODE_NAME = "tfjob-node"
SHARED_STORAGE_CLASS = "shared"  # ReadWriteMany volumes every node sees (the default: `standard`)
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
    **second_node.EXES,  # the second node's: containerd-2, kubelet-2, kube-proxy-2
}


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


def iptables_chains() -> set[str]:
    """Every `table/chain` of the host's iptables (the backend `iptables` picks)."""
    chains = set()
    table = ""
    for line in run("iptables-save").stdout.splitlines():
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
        for line in run("iptables-save", "-t", table).stdout.splitlines():
            rule = shlex.split(line) if line.startswith("-A ") else []
            jumps_to = rule[rule.index("-j") + 1] if "-j" in rule[:-1] else ""
            if rule and rule[1] not in names and jumps_to in names:
                run("iptables", "-t", table, "-D", *rule[1:], check=False)
        for flag in ("-F", "-X"):
            for name in sorted(names):
                run("iptables", "-t", table, flag, name, check=False)


def pause_archive(directory: Path) -> Path:
    """The sandbox image, as a docker archive: Kubernetes' own pause.c, built static.

    No registry is reachable, so the image containerd puts every pod's network namespace in
    is made here from the Go module the control plane is built from.
    """
    out = directory / "pause.tar"
    if out.exists():
        return out
    directory.mkdir(parents=True, exist_ok=True)
    binary = compile_pause(directory / "pause")
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


class Node(RealNode):
    """The control plane plus one real node, started by `up` and stopped by `down`; `second()`
    adds a second node (`second_node.SecondNode`) to it."""

    name = NODE_NAME
    address = NODE_IP
    pod_cidr = POD_CIDR

    def __init__(self, directory: Path | None = None) -> None:
        d = (directory or state_dir()).absolute()
        super().__init__(
            d,
            bed=d,  # the records (host.json, pids.json) are node 1's
            plane=ControlPlane(d / "plane", address=NODE_IP, node=True),
            kubeconfig=d / "kubeconfig",
            store=cache_dir() / "containerd",  # images persist: imported once
        )
        self.volumes = self.dir / "volumes"
        # Every archive imported into node 1, in order: a second node gets the same.
        self.archives: list[Path] = []
        self._second: second_node.SecondNode | None = None

    # -- bring-up ---------------------------------------------------------------------------

    def up(self, archives: list[Path], timeout: float = 300) -> Node:
        """Start everything; import `archives` (docker archives) into containerd."""
        reason = missing_prerequisites()
        if reason:
            raise NodeError(reason)
        self.check_room(archives)
        if (self.dir / "host.json").exists():
            self.log(f"a previous node left state in {self.dir}: tearing it down first")
            teardown(self.dir)
        started = time.monotonic()
        deadline = started + timeout
        run("bash", str(HOST_PACKAGES), timeout=900)
        ensure(CONTAINERD)
        self.dir.mkdir(parents=True, exist_ok=True)
        self._record_host()
        try:
            self._network()
            self.step(
                "control plane", lambda: self.plane.start(timeout=deadline - time.monotonic())
            )
            shutil.copy(self.plane.kubeconfig, self.kubeconfig)
            self.step("containerd", self.start_containerd)
            self.step(
                "images",
                lambda: self.import_images([pause_archive(self.store / "pause"), *archives]),
            )
            self.step("kubelet", lambda: self.start_kubelet(deadline))
            self.step("kube-proxy", lambda: self._kube_proxy(deadline))
            self.step("dns and volumes", lambda: self._services(deadline))
        except BaseException:
            self.down()
            raise
        self.timings["total"] = time.monotonic() - started
        return self

    def _record_host(self) -> None:
        """What the host was before anything changed, for `teardown`."""
        host = {
            "sysctls": read_sysctls(),
            "chains": sorted(iptables_chains()),
            "fixed_paths": [p for p in FIXED_PATHS if os.path.lexists(p)],
            # `ip netns add` (the second node) makes /run/netns a mount point of its own.
            "netns_mounted": is_mount_point(NETNS_DIR),
        }
        (self.dir / "host.json").write_text(json.dumps(host, indent=1))

    def _network(self) -> None:
        if run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
            run("ip", "link", "add", BRIDGE, "type", "bridge")
            run("ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "address", bridge_mac(NODE_IP), "up")
        # The cluster's range ends here: a node that is down or cut off (its route gone with its
        # link) is unreachable at once, and no pod's packet to it leaves by the default route.
        run("ip", "route", "replace", "unreachable", CLUSTER_CIDR)
        self.write_cni_config()

    def import_images(self, archives: list[Path]) -> None:
        """Import each archive once (a record in the store names what it already holds); a
        second node, if one runs, gets it too, and so does any brought up later."""
        super().import_images(archives)
        self.archives += [a for a in archives if a not in self.archives]
        if self._second is not None and self._second.state == "up":
            self._second.import_images(archives)

    def _kube_proxy(self, deadline: float) -> None:
        before = set(self.host_record()["chains"])
        self.start_kube_proxy(
            deadline,
            lambda: (
                "nat/KUBE-SERVICES" in iptables_chains() - before
                and "default/kubernetes" in run("iptables-save", "-t", "nat").stdout
            ),
        )

    def _services(self, deadline: float) -> None:
        dns = self.dir / "dns"
        dns.mkdir(parents=True, exist_ok=True)
        self.volumes.mkdir(parents=True, exist_ok=True)
        hosts = dns / "cluster.hosts"
        hosts.touch()
        hosts.chmod(0o644)
        self.spawn(
            "dnsmasq",
            [
                "/usr/sbin/dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null",
                "--no-resolv", "--no-hosts", "--no-poll", f"--listen-address={NODE_IP}",
                "--bind-interfaces", "--port=53", f"--hostsdir={dns}",
                f"--local=/{CLUSTER_DOMAIN}/", "--domain-needed", "--local-ttl=1",
                f"--pid-file={dns / 'dnsmasq.pid'}", "--log-facility=-",
            ],
        )  # fmt: skip
        self.spawn(
            "nodeservices",
            [
                sys.executable, "-m", "tfjob_testbed.nodes.nodeservices",
                f"--kubeconfig={self.kubeconfig}", f"--hosts-file={hosts}",
                f"--volumes-dir={self.volumes}", f"--cluster-domain={CLUSTER_DOMAIN}",
                # Like kind's local-path: a volume is made on the node its first pod runs on
                # and pinned there; `shared` is the NFS-like class both nodes see.
                "--binding-mode=WaitForFirstConsumer", f"--shared-class={SHARED_STORAGE_CLASS}",
            ],
        )  # fmt: skip
        log = self.plane.workdir / "nodeservices.log"
        self.until(
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
            while not until():  # not self.until: that fails on the process stopped here
                if time.monotonic() > deadline:
                    raise NodeError(f"timed out waiting for the end of the {name} outage")
                time.sleep(0.2)
        finally:
            self.plane.start_process(name)
            self.save_pids()
        deadline = time.monotonic() + timeout
        if name == "kubelet":
            log = self.plane.workdir / "kubelet.log"
            self.until(
                deadline,
                "kubelet start",
                lambda: "Starting Device Plugin manager" in log.read_text(errors="replace"),
            )
            restore_sysctls(self.host_record()["sysctls"], KUBELET_SYSCTLS)  # it set them again
        elif name == "containerd":
            self.until(
                deadline, "containerd", lambda: self.ctr("version", check=False).returncode == 0
            )
        self.until(deadline, f"node {NODE_NAME} Ready after the {name} outage", self.node_ready)

    # -- teardown ---------------------------------------------------------------------------

    def second(self, timeout: float = 600) -> second_node.SecondNode:
        """A healthy second node (`second_node.SecondNode`): the one running if it is, else a
        fresh one, after tearing down one that was killed, partitioned or broken (its Node
        object and the pods bound to it deleted from the API too)."""
        if self._second is not None:
            if self._second.healthy():
                return self._second
            self.log(f"{self._second.name} is {self._second.state}: replacing it")
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


def _drain(kubeconfig: Path, timeout: float = 60) -> None:
    """Delete every workload and pod, and wait (bounded) for the pods to be gone."""
    kubectl = [kubectl_path(), "--kubeconfig", str(kubeconfig), "--request-timeout=10s"]
    run(*kubectl, "delete", "tfjobs,deployments,statefulsets,replicasets,daemonsets,jobs",
        "--all", "-A", "--wait=false", check=False)  # fmt: skip
    run(*kubectl, "delete", "pods", "--all", "-A", "--grace-period=1", "--wait=false", check=False)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = run(*kubectl, "get", "pods", "-A", "-o", "name", check=False)
        if proc.returncode != 0 or not proc.stdout.strip():
            break
        time.sleep(0.5)
    while time.monotonic() < deadline and list(Path("/run/netns").glob("cni-*")):
        time.sleep(0.2)


def leftovers(directory: Path | None = None) -> list[str]:
    """What of a node (and of a second node) is still on the host: empty once `teardown` has
    run."""
    d = (directory or state_dir()).absolute()
    found = []
    pids_file = d / "pids.json"
    if pids_file.exists():
        for name, pid in json.loads(pids_file.read_text()).items():
            if alive(pid):
                found.append(f"process {name} ({pid})")
    found += [f"shim {p}" for p in shims_of(d / "containerd" / "containerd.sock")]
    if run("ip", "link", "show", BRIDGE, check=False).returncode == 0:
        found.append(f"interface {BRIDGE}")
    if run("ip", "route", "show", "type", "unreachable", CLUSTER_CIDR).stdout.strip():
        found.append(f"route unreachable {CLUSTER_CIDR}")
    found += [f"netns {p.name}" for p in Path("/run/netns").glob("cni-*")]
    found += [
        f"mount {m}" for m in mounts_under([str(d), str(cache_dir() / "containerd"), *FIXED_PATHS])
    ]
    found += [f"iptables {c}" for c in sorted(iptables_chains()) if "/KUBE-" in c]
    found += [f"cgroup {c}" for c in sorted(map(str, Path("/sys/fs/cgroup").glob("*/kubepods")))]
    found += second_node.leftovers(d)
    return found


def teardown(directory: Path | None = None) -> None:
    """Put the host back from the records a node left: safe to run twice, or with no node."""
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
        run(str(kube_proxy), "--cleanup", "--proxy-mode=iptables", check=False)
    before = set(host["chains"]) if host else set()
    remove_chains(sorted(c for c in iptables_chains() - before if "/KUBE-" in c))
    # A namespace its last user has just left may hold on to them for a moment: retried.
    deadline = time.monotonic() + 10
    while (netns := list(Path(NETNS_DIR).glob("cni-*"))) and time.monotonic() < deadline:
        for ns in netns:
            run("ip", "netns", "delete", ns.name, check=False)
        time.sleep(0.1)
    run("ip", "link", "delete", BRIDGE, check=False)
    run("ip", "route", "delete", "unreachable", CLUSTER_CIDR, check=False)
    for mount in mounts_under([str(d), str(cache_dir() / "containerd"), *FIXED_PATHS]):
        run("umount", "-l", mount, check=False)
    for top in cgroup_tops("kubepods"):
        with contextlib.suppress(FileNotFoundError):
            subs = [p for p in top.rglob("*") if p.is_dir()]
            for sub in sorted(subs, key=lambda p: len(p.parts), reverse=True):
                with contextlib.suppress(OSError):
                    sub.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()
    if host is not None:
        if not host.get("netns_mounted", True) and is_mount_point(NETNS_DIR):
            run("umount", NETNS_DIR, check=False)
        restore_sysctls(host["sysctls"])
        for path in FIXED_PATHS:
            if path not in host["fixed_paths"]:
                shutil.rmtree(path, ignore_errors=True)
    logs = d / "logs"  # kept, for a look after a failure: the next teardown replaces them
    if (d / "plane").is_dir():
        shutil.rmtree(logs, ignore_errors=True)
        logs.mkdir(parents=True)
        for log in (d / "plane").glob("*.log"):
            shutil.copy(log, logs / log.name)
    for entry in ("plane", "containerd", "kubelet", "cni", "dns", "volumes", "pids.json"):
        target = d / entry
        if target.is_dir():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)
    host_file.unlink(missing_ok=True)
