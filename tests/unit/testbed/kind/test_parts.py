"""What a kind node image is made of: kind's files read from Go source, kubeadm's images mapped
to the bed's programs, and the settings this host adds to kind's defaults."""

from __future__ import annotations

import json

import pytest
import yaml

from tfjob_testbed.kind import parts

GO_SOURCE = """
package nodeimage

/* a block comment with `backticks` and const x = "no" */
const helper = "docker.io/kindest/helper:v1" // trailing comment
const manifest = `
kind: Pod
image: ` + helper + `
url: http://example/` + "tail\\n"
var notAConst = "skipped"
const (
\tgrouped = "not read"
)
"""


def test_go_string_constants_resolves_concatenations_and_references() -> None:
    consts = parts.go_string_constants(GO_SOURCE)
    assert consts["helper"] == "docker.io/kindest/helper:v1"
    assert consts["manifest"] == (
        "\nkind: Pod\nimage: docker.io/kindest/helper:v1\nurl: http://example/tail\n"
    )
    assert "notAConst" not in consts


KUBEADM = [
    "registry.k8s.io/kube-apiserver:v1.37.2",
    "registry.k8s.io/kube-controller-manager:v1.37.2",
    "registry.k8s.io/kube-scheduler:v1.37.2",
    "registry.k8s.io/kube-proxy:v1.37.2",
    "registry.k8s.io/coredns/coredns:v1.14.6",
    "registry.k8s.io/pause:3.10.2",
    "registry.k8s.io/etcd:3.7.0-0",
]
STORAGE = [
    "docker.io/kindest/local-path-provisioner:v2",
    "docker.io/kindest/local-path-helper:v1",
]


@pytest.mark.parametrize(
    ("image", "binary", "tools", "entrypoint"),
    [
        ("registry.k8s.io/kube-apiserver:v1.37.2", "kube-apiserver", False, False),
        ("registry.k8s.io/kube-proxy:v1.37.2", "kube-proxy", True, False),  # needs iptables
        ("registry.k8s.io/coredns/coredns:v1.14.6", "coredns", False, True),
        ("registry.k8s.io/pause:3.10.2", "pause", False, True),
        ("registry.k8s.io/etcd:3.7.0-0", "etcd", False, False),
        ("docker.io/kindest/local-path-provisioner:v2", "local-path-provisioner", False, True),
        ("docker.io/kindest/local-path-helper:v1", None, True, False),  # a shell only
        ("docker.io/tfjob-operator/kind-cni:v0", None, True, False),
    ],
)
def test_each_image_has_its_program(
    image: str, binary: str | None, tools: bool, entrypoint: bool
) -> None:
    found = {
        c.image: c
        for c in parts.components(KUBEADM, STORAGE, "docker.io/tfjob-operator/kind-cni:v0")
    }
    assert len(found) == len(KUBEADM) + len(STORAGE) + 1
    component = found[image]
    assert (component.binary, component.tools, component.entrypoint) == (binary, tools, entrypoint)


def test_an_image_kubeadm_wants_that_the_bed_cannot_build_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"registry\.k8s\.io/kube-dns:1"):
        parts.components([*KUBEADM, "registry.k8s.io/kube-dns:1"], STORAGE, "cni:v0")


def test_containerfile_copies_the_binary_and_sets_the_entrypoint() -> None:
    coredns = parts.Component("c:v1", "coredns", "/coredns", entrypoint=True)
    assert coredns.containerfile("scratch").splitlines() == [
        "FROM scratch",
        "COPY coredns /coredns",
        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        'ENTRYPOINT ["/coredns"]',
    ]
    helper = parts.Component("h:v1", None, "", tools=True)
    assert "COPY" not in helper.containerfile("tools")


def test_containerd_config_takes_kubeadms_pause_image() -> None:
    kind = '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.10"\n'
    out = parts.containerd_config(kind, "registry.k8s.io/pause:3.10.2")
    assert 'sandbox_image = "registry.k8s.io/pause:3.10.2"' in out
    with pytest.raises(ValueError):
        parts.containerd_config("version = 2\n", "p:1")


def test_cri_base_spec_adds_kinds_hook_and_drops_rlimits_without_touching_its_input() -> None:
    default = {"process": {"rlimits": [{"type": "RLIMIT_NOFILE"}], "cwd": "/"}}
    spec = parts.cri_base_spec(default)
    assert spec["hooks"]["createContainer"] == [{"path": "/kind/bin/mount-product-files.sh"}]
    assert "rlimits" not in spec["process"]
    assert default["process"]["rlimits"]


def test_cni_manifest_is_one_daemonset_once_kind_templates_the_pod_subnet() -> None:
    manifest = parts.cni_manifest("docker.io/tfjob-operator/kind-cni:v0")
    assert "would you kindly template this file" in manifest
    # kind's Go template sees only its own action: any other `{{` would fail its parse.
    assert manifest.count("{{") == 1
    rendered = manifest.replace("{{ .PodSubnet }}", "10.244.0.0/16")
    (daemonset,) = list(yaml.safe_load_all(rendered))
    assert daemonset["kind"] == "DaemonSet"
    pod = daemonset["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True
    (container,) = pod["containers"]
    assert container["env"] == [{"name": "POD_SUBNET", "value": "10.244.0.0/16"}]
    script = container["command"][-1]
    assert "/etc/cni/net.d/10-kind.conflist" in script
    conflist = script.split("<<EOF\n", 1)[1].split("\nEOF\n", 1)[0]
    plugins = json.loads(conflist.replace("$POD_SUBNET", "10.244.0.0/16"))["plugins"]
    assert [p["type"] for p in plugins] == ["ptp", "portmap"]
    assert plugins[0]["ipam"]["ranges"] == [[{"subnet": "10.244.0.0/16"}]]


@pytest.mark.parametrize(
    ("cgroup_v1", "restricted", "kubelet_patch", "containerd_patch"),
    [
        (False, False, False, False),
        (True, False, True, False),
        (False, True, False, True),
        (True, True, True, True),
    ],
)
def test_cluster_config_adds_only_what_the_host_needs(
    cgroup_v1: bool, restricted: bool, kubelet_patch: bool, containerd_patch: bool
) -> None:
    config = yaml.safe_load(
        parts.cluster_config("c", cgroup_v1=cgroup_v1, restricted_oom_score_adj=restricted)
    )
    assert config["name"] == "c"
    assert config["nodes"] == [{"role": "control-plane"}]
    patches = config.get("kubeadmConfigPatches", [])
    assert bool(patches) is kubelet_patch
    if patches:
        assert yaml.safe_load(patches[0]) == {
            "kind": "KubeletConfiguration",
            "failCgroupV1": False,
        }
    toml = config.get("containerdConfigPatches", [])
    assert bool(toml) is containerd_patch
    if toml:
        assert "restrict_oom_score_adj = true" in toml[0]


def test_cluster_config_turns_kubernetes_own_gangs_on() -> None:
    """As on the real node's plane: the gate on every component, the API version served."""
    config = yaml.safe_load(
        parts.cluster_config("c", cgroup_v1=False, restricted_oom_score_adj=False)
    )
    assert config["featureGates"] == {"GenericWorkload": True}
    assert config["runtimeConfig"] == {"scheduling.k8s.io/v1beta1": "true"}
