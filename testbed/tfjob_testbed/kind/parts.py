"""What a kind node image is made of, as pure functions: which bed program stands behind each
image kubeadm and kind start, kind's base files and manifests read from kind's own module, and
the few settings this host needs on top (`cluster_config`).

Everything here takes text or names and returns text or names, so the tables in
tests/unit/testbed/test_kind_parts.py hold it; `nodeimage` does the building.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

# What kind's base image (images/base/Dockerfile) installs, from Debian 12 here; nfs-common and
# open-iscsi are left out (no NFS or iSCSI volume is used here), runc comes from Debian.
NODE_PACKAGES = (
    "systemd",
    "conntrack",
    "iptables",
    "nftables",
    "iproute2",
    "ethtool",
    "util-linux",
    "mount",
    "kmod",
    "libseccomp2",
    "pigz",
    "fuse-overlayfs",
    "e2fsprogs",
    "bash",
    "ca-certificates",
    "curl",
    "jq",
    "procps",
    "runc",
)
# The image kube-proxy, the CNI's DaemonSet and the storage helper run from: a shell, iptables
# and nftables (kube-proxy's upstream image is distroless-iptables).
TOOLS_PACKAGES = ("iptables", "nftables", "conntrack", "ca-certificates")
# kind's node images keep their version here; `kind create` reads it.
VERSION_FILE = "/kind/version"
CNI_MANIFEST = "/kind/manifests/default-cni.yaml"
STORAGE_MANIFEST = "/kind/manifests/default-storage.yaml"
CNI_IMAGE_REPOSITORY = "docker.io/tfjob-operator/kind-cni"


@dataclass(frozen=True)
class Component:
    """One image the node holds: its name, the bed binary it carries, where, and on what."""

    image: str  # the name kubeadm or a manifest asks for
    # A built command (gobuild), "pause" (built from the Kubernetes module's C), or None: the
    # tools image itself under this name.
    binary: str | None
    path: str  # where the binary goes in the image
    tools: bool = False  # on the tools image (a shell, iptables), else on an empty one
    entrypoint: bool = False  # the binary is the image's entrypoint (else the pod's command)

    def containerfile(self, base: str) -> str:
        """The Containerfile that builds it from a context holding only the binary."""
        lines = [f"FROM {base}"]
        if self.binary:
            lines.append(f"COPY {self.binary} {self.path}")
        lines.append("ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        if self.entrypoint:
            lines.append(f'ENTRYPOINT ["{self.path}"]')
        return "\n".join(lines) + "\n"


def _repository(image: str) -> str:
    return image.rsplit(":", 1)[0].rsplit("/", 1)[-1]


# kubeadm's images (`kubeadm config images list`) by repository: the command that serves it.
_KUBEADM = {
    "kube-apiserver": ("kube-apiserver", "/usr/local/bin/kube-apiserver", False, False),
    "kube-controller-manager": (
        "kube-controller-manager",
        "/usr/local/bin/kube-controller-manager",
        False,
        False,
    ),
    "kube-scheduler": ("kube-scheduler", "/usr/local/bin/kube-scheduler", False, False),
    "kube-proxy": ("kube-proxy", "/usr/local/bin/kube-proxy", True, False),
    "etcd": ("etcd", "/usr/local/bin/etcd", False, False),
    "coredns": ("coredns", "/coredns", False, True),
    "pause": ("pause", "/pause", False, True),
}


def components(
    kubeadm_images: list[str], storage_images: list[str], cni_image: str
) -> list[Component]:
    """Every image to build and import: kubeadm's list, kind's storage images, the CNI's.

    An image kubeadm names that the bed cannot serve is an error, not a silent pull at boot.
    """
    found = []
    for image in kubeadm_images:
        repository = _repository(image)
        if repository not in _KUBEADM:
            raise ValueError(f"kubeadm wants {image}; the bed builds no image for {repository}")
        binary, path, tools, entry = _KUBEADM[repository]
        found.append(Component(image, binary, path, tools, entry))
    for image in storage_images:
        if _repository(image) == "local-path-provisioner":
            binary = "local-path-provisioner"
            found.append(Component(image, binary, f"/usr/local/bin/{binary}", entrypoint=True))
        else:  # the helper runs the provisioner's shell scripts: it needs sh, mkdir, rm
            found.append(Component(image, None, "", tools=True))
    found.append(Component(cni_image, None, "", tools=True))
    return found


# ---- kind's own files, read from its module ---------------------------------------------------

_GO_TOKEN = re.compile(
    r"(?P<raw>`[^`]*`)|(?P<str>\"(?:[^\"\\\n]|\\.)*\")|(?P<comment>/\*.*?\*/|//[^\n]*)"
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>[=+()\[\]{},])|(?P<space>\s+)|(?P<other>.)",
    re.S,
)


def go_string_constants(source: str) -> dict[str, str]:
    """`const NAME = "a" + other + `b``: the string constants of a Go file, concatenations
    and references to earlier ones resolved. How kind's manifests are read from its module."""
    tokens = [
        (m.lastgroup, m.group())
        for m in _GO_TOKEN.finditer(source)
        if m.lastgroup not in ("comment", "space")
    ]
    consts: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        if tokens[i] == ("ident", "const") and i + 2 < len(tokens) and tokens[i + 2] == ("op", "="):
            name, i = tokens[i + 1][1], i + 3
            pieces: list[str] = []
            resolved = True
            while i < len(tokens):
                kind, text = tokens[i]
                if kind == "raw":
                    pieces.append(text[1:-1])
                elif kind == "str":
                    pieces.append(json.loads(text))
                elif kind == "ident" and text in consts:
                    pieces.append(consts[text])
                else:
                    resolved = False
                    break
                if i + 1 < len(tokens) and tokens[i + 1] == ("op", "+"):
                    i += 2
                    continue
                i += 1
                break
            if resolved:
                consts[name] = "".join(pieces)
        else:
            i += 1
    return consts


def containerd_config(kind_config: str, sandbox_image: str) -> str:
    """kind's containerd configuration with kubeadm's pause image as the sandbox, as kind's
    `build node-image` sets it."""
    replaced, count = re.subn(
        r'(?m)^(\s*sandbox_image\s*=\s*)"[^"]*"', rf'\g<1>"{sandbox_image}"', kind_config
    )
    if count != 1:
        raise ValueError("kind's containerd config has no single sandbox_image line")
    return replaced


def cri_base_spec(default_spec: dict[str, Any]) -> dict[str, Any]:
    """`ctr oci spec` as kind's base image turns it into /etc/containerd/cri-base.json: the
    product-files hook added, the default rlimits dropped."""
    spec: dict[str, Any] = json.loads(json.dumps(default_spec))
    hooks = spec.setdefault("hooks", {}).setdefault("createContainer", [])
    hooks.append({"path": "/kind/bin/mount-product-files.sh"})
    spec.get("process", {}).pop("rlimits", None)
    return spec


# ---- the CNI ------------------------------------------------------------------------------------

CNI_CONFLIST = """{
  "cniVersion": "1.0.0",
  "name": "kind",
  "plugins": [
    {"type": "ptp", "ipMasq": false,
     "ipam": {"type": "host-local", "dataDir": "/run/cni-ipam-state",
              "routes": [{"dst": "0.0.0.0/0"}], "ranges": [[{"subnet": "POD_SUBNET"}]]},
     "mtu": 1500},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}"""


def cni_manifest(image: str) -> str:
    """The node's default CNI (kind's template slot, `{{ .PodSubnet }}`): a DaemonSet that
    writes a ptp + host-local configuration for the cluster's pod subnet, with masquerading
    to the outside. kind's own kindnetd is not published as a Go module; this network spans
    one node (each node would hand out the whole subnet)."""
    conflist = CNI_CONFLIST.replace("POD_SUBNET", "$POD_SUBNET")
    script = (
        "set -e\n"
        f"cat > /etc/cni/net.d/10-kind.conflist.tmp <<EOF\n{conflist}\nEOF\n"
        "mv /etc/cni/net.d/10-kind.conflist.tmp /etc/cni/net.d/10-kind.conflist\n"
        "iptables -t nat -C POSTROUTING -s $POD_SUBNET ! -d $POD_SUBNET -j MASQUERADE 2>/dev/null"
        " || iptables -t nat -A POSTROUTING -s $POD_SUBNET ! -d $POD_SUBNET -j MASQUERADE\n"
        "exec sleep infinity\n"
    )
    indented = "\n".join("            " + line for line in script.splitlines())
    return f"""# would you kindly template this file
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: kind-cni
  namespace: kube-system
  labels: {{app: kind-cni}}
spec:
  selector:
    matchLabels: {{app: kind-cni}}
  template:
    metadata:
      labels: {{app: kind-cni}}
    spec:
      hostNetwork: true
      priorityClassName: system-node-critical
      tolerations: [{{operator: Exists}}]
      containers:
      - name: cni
        image: {image}
        command:
        - /bin/sh
        - -c
        - |
{indented}
        env:
        - {{name: POD_SUBNET, value: "{{{{ .PodSubnet }}}}"}}
        securityContext:
          capabilities: {{add: [NET_ADMIN, NET_RAW]}}
        resources:
          requests: {{cpu: 10m, memory: 10Mi}}
        volumeMounts:
        - {{name: cni-cfg, mountPath: /etc/cni/net.d}}
        - {{name: xtables-lock, mountPath: /run/xtables.lock}}
      volumes:
      - name: cni-cfg
        hostPath: {{path: /etc/cni/net.d}}
      - name: xtables-lock
        hostPath: {{path: /run/xtables.lock, type: FileOrCreate}}
"""


# ---- what this host needs on top of kind's defaults ---------------------------------------------


def cluster_config(name: str, *, cgroup_v1: bool, restricted_oom_score_adj: bool) -> str:
    """A one-node kind cluster's configuration, with only what this host needs added:

    - on cgroup v1, the kubelet (1.35+) must be told it may run there (`failCgroupV1: false`);
    - where oom_score_adj cannot go below 0 (a container's limit), containerd must not ask
      for -998 on every pause container (`restrict_oom_score_adj`);

    and Kubernetes' own gang scheduling on, as on the real node's plane (`controlplane.argv`).
    """
    lines = [
        "kind: Cluster",
        "apiVersion: kind.x-k8s.io/v1alpha4",
        f"name: {name}",
        "featureGates:",
        "  GenericWorkload: true",
        "runtimeConfig:",
        '  "scheduling.k8s.io/v1beta1": "true"',
        "nodes:",
        "- role: control-plane",
    ]
    if cgroup_v1:
        lines += [
            "kubeadmConfigPatches:",
            "- |",
            "  kind: KubeletConfiguration",
            "  failCgroupV1: false",
        ]
    if restricted_oom_score_adj:
        lines += [
            "containerdConfigPatches:",
            "- |",
            '  [plugins."io.containerd.grpc.v1.cri"]',
            "    restrict_oom_score_adj = true",
        ]
    return "\n".join(lines) + "\n"
