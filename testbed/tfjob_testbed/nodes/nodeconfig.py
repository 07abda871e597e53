"""What every real node of the bed is configured with, node 1 and the second node alike: the
facts they share and the files and command lines of their pieces, built from them.

- the cluster's network: its pods' range (CLUSTER_CIDR), each node's bridge BRIDGE with a MAC of
  its own (`bridge_mac`) and the CNI network of its pods (`cni_conflist`), the cluster DNS
  (CLUSTER_DNS, CLUSTER_DOMAIN);
- containerd's config.toml (`containerd_config`), its sandbox image PAUSE_IMAGE;
- kubelet's configuration and command line (`kubelet_config`, `kubelet_argv`), the GPUs a node
  advertises (GPUS), and kube-proxy's command line (`kube_proxy_argv`);
- what the nodes change on the host besides: kernel settings (SYSCTLS, KUBELET_SYSCTLS), the
  paths kubelet and containerd write whatever their roots (FIXED_PATHS) and where pods' network
  namespaces live (NETNS_DIR).

Kept apart from `realnode.py`, which writes these files and runs the processes, so that what a
node is configured with reads, and is tested, as plain values. The command lines name the
programs of the Kubernetes release the bed builds (`node_binary`, built on first use).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tfjob_testbed.controlplane.argv import SERVICE_CLUSTER_IP_RANGE
from tfjob_testbed.controlplane.binaries import node_binary
from tfjob_testbed.nodes.capacity import EVICTION_HARD

BRIDGE = "tfjob0"  # every node's pods' bridge (node 2's inside its network namespace)
# Every node's pods: node 1 has 10.244.0.0/24, the second node 10.244.1.0/24. Pods route the
# whole range to their bridge, and kube-proxy treats it as in-cluster traffic.
CLUSTER_CIDR = "10.244.0.0/16"
CLUSTER_DOMAIN = "cluster.local"
# dnsmasq, on node 1's bridge (node.NODE_IP), routed to from every node.
CLUSTER_DNS = "10.244.0.1"
NETNS_DIR = "/run/netns"
GPUS = 2  # nvidia.com/gpu capacity a node advertises: the GPU examples schedule, on CPU
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
# A lost node is noticed in about 20 s (kubelets post status every 4 s, their lease lasts 20 s,
# the controller-manager's --node-monitor-grace-period is 20 s), for the tests' speed: the real
# defaults (10 s, 40 s, 40 s) would make every node-loss test wait twice as long.
NODE_STATUS_UPDATE_FREQUENCY = "4s"
NODE_LEASE_DURATION_SECONDS = 20


def bridge_mac(address: str) -> str:
    """The fixed, locally administered MAC of the bridge whose address is `address`.

    A bridge whose MAC nobody set takes its lowest port's, and changes it when that port
    leaves: a pod deleted (a drain, a restart) moves the MAC of every other pod's gateway, which
    is also the cluster DNS. Their ARP entries then point nowhere until they expire, and name
    lookups are lost for many seconds. A MAC set by hand is one the kernel never replaces."""
    octets = [int(o) for o in address.split(".")]
    if len(octets) != 4 or not all(0 <= o <= 255 for o in octets):
        raise ValueError(f"not an IPv4 address: {address!r}")
    return ":".join(f"{b:02x}" for b in (0x02, 0x42, *octets))


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
        "clusterDNS": [CLUSTER_DNS],  # dnsmasq on node 1's bridge, routed to from every node
        "resolvConf": str(directory / "resolv.conf"),
        "volumePluginDir": str(directory / "volume-plugins"),
        "makeIPTablesUtilChains": False,
        # No registry: every image is imported, so none may be collected.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": dict(EVICTION_HARD),
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
