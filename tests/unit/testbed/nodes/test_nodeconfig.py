"""What every real node is configured with: the files and command lines built from the
cluster's facts, as values (the programs they name stand in for the built ones)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tfjob_testbed.controlplane.argv import SERVICE_CLUSTER_IP_RANGE
from tfjob_testbed.nodes import nodeconfig
from tfjob_testbed.nodes.capacity import EVICTION_HARD
from tfjob_testbed.nodes.nodeconfig import (
    CLUSTER_CIDR,
    CLUSTER_DNS,
    CLUSTER_DOMAIN,
    KUBELET_SYSCTLS,
    PAUSE_IMAGE,
    SYSCTLS,
    bridge_mac,
    cni_conflist,
    containerd_config,
    kube_proxy_argv,
    kubelet_argv,
    kubelet_config,
)

NODE_1 = Path("/tmp/tfjob-node")
NODE_2 = NODE_1 / "node-2"


@pytest.mark.parametrize(
    ("address", "mac"),
    [
        ("10.244.0.1", "02:42:0a:f4:00:01"),  # node 1's bridge
        ("10.244.1.1", "02:42:0a:f4:01:01"),  # the second node's: another MAC
        ("255.0.16.9", "02:42:ff:00:10:09"),
    ],
)
def test_bridge_mac_is_locally_administered_and_names_the_address(address: str, mac: str) -> None:
    assert bridge_mac(address) == mac
    assert int(mac.split(":")[0], 16) & 0b11 == 0b10  # locally administered, unicast


@pytest.mark.parametrize("address", ["10.244.0", "10.244.0.256", "fe80::1", ""])
def test_bridge_mac_refuses_what_is_no_ipv4_address(address: str) -> None:
    with pytest.raises(ValueError):
        bridge_mac(address)


@pytest.mark.parametrize(
    ("subnet", "gateway", "ipam"),
    [
        ("10.244.0.0/24", "10.244.0.1", NODE_1 / "cni" / "ipam"),
        ("10.244.1.0/24", "10.244.1.1", NODE_2 / "cni" / "ipam"),
    ],
)
def test_pods_get_the_nodes_range_and_routes_to_the_cluster_only(
    subnet: str, gateway: str, ipam: Path
) -> None:
    bridge, portmap = cni_conflist("tfjob0", subnet, gateway, ipam)["plugins"]
    assert (bridge["type"], bridge["bridge"], bridge["isGateway"]) == ("bridge", "tfjob0", True)
    assert bridge["ipMasq"] is False  # no way out
    assert bridge["ipam"] == {
        "type": "host-local",
        "dataDir": str(ipam),
        "ranges": [[{"subnet": subnet, "gateway": gateway}]],
        "routes": [{"dst": CLUSTER_CIDR}, {"dst": SERVICE_CLUSTER_IP_RANGE}],
    }
    assert portmap == {"type": "portmap", "capabilities": {"portMappings": True}}


@pytest.mark.parametrize(
    ("root", "state"),
    [
        (Path("/root/.cache/tfjob-operator/containerd/root"), NODE_1 / "containerd"),
        (Path("/root/.cache/tfjob-operator/containerd-2/root"), NODE_2 / "containerd"),
    ],
)
def test_containerd_keeps_images_in_the_cache_and_the_rest_in_its_state(
    root: Path, state: Path
) -> None:
    socket = state / "containerd.sock"
    config = tomllib.loads(containerd_config(root, state, socket, state.parent / "cni" / "net.d"))
    plugins = config["plugins"]
    cri = plugins["io.containerd.cri.v1.runtime"]
    assert (config["root"], config["state"]) == (str(root), f"{state}/state")
    assert plugins["io.containerd.server.v1.grpc"]["address"] == str(socket)
    assert plugins["io.containerd.server.v1.ttrpc"]["address"] == f"{socket}.ttrpc"
    assert plugins["io.containerd.internal.v1.opt"]["path"] == f"{state}/opt"
    assert plugins["io.containerd.nri.v1.nri"]["disable"] is True  # its socket would be shared
    assert plugins["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == PAUSE_IMAGE
    assert cri["containerd"]["runtimes"]["runc"]["options"]["Root"] == f"{state}/runc"
    assert cri["cni"]["conf_dir"] == str(state.parent / "cni" / "net.d")


@pytest.mark.parametrize(
    ("directory", "address", "cgroup_root"),
    [
        (NODE_1 / "kubelet", "10.244.0.1", None),
        (NODE_2 / "kubelet", "10.244.1.1", "/tfjob-node-2"),
    ],
)
def test_kubelet_serves_on_its_node_ip_and_asks_the_cluster_dns(
    directory: Path, address: str, cgroup_root: str | None
) -> None:
    socket = directory.parent / "containerd" / "containerd.sock"
    config = kubelet_config(directory, address, Path("/w/pki"), socket, cgroup_root=cgroup_root)
    assert config["containerRuntimeEndpoint"] == f"unix://{socket}"
    assert config["address"] == address
    assert config["authentication"]["x509"] == {"clientCAFile": "/w/pki/ca.crt"}
    assert (config["clusterDomain"], config["clusterDNS"]) == (CLUSTER_DOMAIN, [CLUSTER_DNS])
    assert config["resolvConf"] == str(directory / "resolv.conf")
    assert config["evictionHard"] == EVICTION_HARD
    assert config.get("cgroupRoot") == cgroup_root
    assert ("cgroupRoot" in config) is (cgroup_root is not None)  # absent: kubelet's default


def test_kubelet_config_has_its_own_eviction_thresholds() -> None:
    config = kubelet_config(NODE_1 / "kubelet", "10.244.0.1", Path("/w/pki"), Path("/s"))
    config["evictionHard"]["memory.available"] = "1Gi"
    assert EVICTION_HARD["memory.available"] != "1Gi"


@pytest.fixture
def binaries(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The programs the command lines name, without building them."""
    where = Path("/k8s/bin")
    monkeypatch.setattr(nodeconfig, "node_binary", lambda name: where / name)
    return where


def flags(argv: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--").partition("=")[::2] for a in argv[1:])


@pytest.mark.parametrize(
    ("directory", "name", "address"),
    [
        (NODE_1 / "kubelet", "tfjob-node", "10.244.0.1"),
        (NODE_2 / "kubelet", "tfjob-node-2", "10.244.1.1"),
    ],
)
def test_kubelet_argv_names_the_node_and_its_files(
    binaries: Path, directory: Path, name: str, address: str
) -> None:
    argv = kubelet_argv(directory, Path("/w/kubeconfig"), name, address)
    assert argv[0] == str(binaries / "kubelet")
    assert flags(argv) == {
        "config": str(directory / "config.yaml"),
        "kubeconfig": "/w/kubeconfig",
        "root-dir": str(directory / "root"),
        "cert-dir": str(directory / "pki"),
        "hostname-override": name,
        "node-ip": address,
        "v": "2",
    }


@pytest.mark.parametrize(
    ("name", "address"),
    [("tfjob-node", "10.244.0.1"), ("tfjob-node-2", "10.244.1.1")],
)
def test_kube_proxy_serves_node_ports_on_its_node_ip_only(
    binaries: Path, name: str, address: str
) -> None:
    argv = kube_proxy_argv(Path("/w/kubeconfig"), name, address)
    assert argv[0] == str(binaries / "kube-proxy")
    got = flags(argv)
    assert (got["proxy-mode"], got["hostname-override"]) == ("iptables", name)
    assert (got["cluster-cidr"], got["bind-address"]) == (CLUSTER_CIDR, address)
    assert got["nodeport-addresses"] == f"{address}/32"
    assert got["healthz-bind-address"].startswith("127.0.0.1:")
    assert got["metrics-bind-address"].startswith("127.0.0.1:")
    assert got["conntrack-max-per-core"] == "0"  # the host's conntrack settings left alone


@pytest.mark.parametrize(
    ("key", "after_kubelet"),
    [
        ("vm.overcommit_memory", True),
        ("vm.panic_on_oom", True),
        ("kernel.panic", True),
        ("kernel.keys.root_maxbytes", True),
        ("net.ipv4.ip_forward", False),  # pod traffic needs it while pods run
        ("net.ipv4.conf.all.route_localnet", False),  # kube-proxy's
    ],
)
def test_only_kubelets_own_settings_are_put_back_after_it(key: str, after_kubelet: bool) -> None:
    assert key in SYSCTLS
    assert (key in KUBELET_SYSCTLS) is after_kubelet
