"""The control plane's programs: the Kubernetes release the bed runs (the newest, or the oldest
claimed), built on first use, or taken from $KUBEBUILDER_ASSETS as envtest does."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tfjob_testbed.controlplane.errors import ControlPlaneError
from tfjob_testbed.core.gobuild import ETCD, KUBERNETES, KUBERNETES_OLDEST, Program, ensure


@dataclass(frozen=True)
class Binaries:
    """Paths of the control-plane executables."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    gangs: bool = False  # the release has Kubernetes' own gang API (1.37+): turned on


def kubernetes() -> Program:
    """The release the bed runs: the newest, or with TFJOB_KUBERNETES=oldest the oldest one the
    project claims (kube-apiserver and kube-controller-manager only: no node)."""
    choice = os.environ.get("TFJOB_KUBERNETES", "newest")
    if choice not in ("newest", "oldest"):
        raise ControlPlaneError(f"TFJOB_KUBERNETES={choice!r}: expected newest or oldest")
    return KUBERNETES_OLDEST if choice == "oldest" else KUBERNETES


def node_binary(name: str) -> Path:
    """A node's program of the newest release (kubelet, kube-proxy, kube-scheduler), built."""
    ensure(KUBERNETES)
    return KUBERNETES.path(name)


def ensure_binaries() -> Binaries:
    """Return usable binaries, building them on first use.

    $KUBEBUILDER_ASSETS (as used by controller-runtime's envtest) wins when set;
    such asset dirs usually lack kube-controller-manager, which is then built.
    """
    release = kubernetes()
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if not assets:
        ensure(ETCD)
        ensure(release)
        return Binaries(
            etcd=ETCD.path("etcd"),
            kube_apiserver=release.path("kube-apiserver"),
            kube_controller_manager=release.path("kube-controller-manager"),
            gangs=release is KUBERNETES,
        )
    asset_dir = Path(assets)
    for name in ("etcd", "kube-apiserver"):
        if not os.access(asset_dir / name, os.X_OK):
            raise FileNotFoundError(f"KUBEBUILDER_ASSETS={assets} has no executable {name}")
    kcm = asset_dir / "kube-controller-manager"
    if not os.access(kcm, os.X_OK):
        ensure(release)
        kcm = release.path("kube-controller-manager")
    return Binaries(
        etcd=asset_dir / "etcd",
        kube_apiserver=asset_dir / "kube-apiserver",
        kube_controller_manager=kcm,
    )
