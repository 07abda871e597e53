"""A kind cluster on this machine: kind built from its module, its podman provider on the bed's
podman storage, the node image `nodeimage` assembles, the project's images loaded with
`kind load image-archive` and the operator installed from its chart.

What this host needs beside kind's defaults, and nothing more:
- podman's settings in a private `containers.conf` (ulimits under this host's hard limits,
  runc, cgroupfs, file events, its own CNI network folder) and `storage.conf` (the bed's
  storage), so the host's own containers, networks and /etc/cni are never touched;
- `/lib/modules`, which kind mounts into the node, made when missing and removed after;
- `failCgroupV1: false` on cgroup v1 and `restrict_oom_score_adj` where a container may not
  lower oom_score_adj (parts.cluster_config).

Usage::

    python -m tfjob_testbed.kind.kind_cluster up [--name N]   # prints the kubeconfig's path
    python -m tfjob_testbed.kind.kind_cluster down [--name N]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tfjob_testbed.addons import kueue_install
from tfjob_testbed.core.paths import cache_dir
from tfjob_testbed.core.tools import ensure_tools
from tfjob_testbed.images import example, podman, podman_store
from tfjob_testbed.kind import nodeimage, parts
from tfjob_testbed.operator_cluster import OperatorCluster, install_chart

DEFAULT_NAME = "tfjob-e2e"
MODULES = Path("/lib/modules")
NETWORK = "kind"  # kind's podman provider puts every cluster on this network
GPUS = 2  # advertised on the node, as the real node's bed does


class KindError(RuntimeError):
    """A kind step failed; the message carries the command's output tail."""


def kind_dir() -> Path:
    return cache_dir() / "kind"


def provider_env() -> dict[str, str]:
    """The environment kind runs podman in: the bed's storage and this host's settings."""
    home = kind_dir()
    home.mkdir(parents=True, exist_ok=True)
    podman_dir = cache_dir() / "podman"
    (home / "networks").mkdir(exist_ok=True)
    containers = home / "containers.conf"
    podman_argv = podman_store.podman_command()
    containers.write_text(
        "[containers]\n"
        'default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]\n'
        "[engine]\n"
        f'runtime = "{podman_argv[podman_argv.index("--runtime") + 1]}"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
        "[network]\n"
        f'network_config_dir = "{home / "networks"}"\n'
    )
    storage = home / "storage.conf"
    storage.write_text(
        "[storage]\n"
        'driver = "overlay"\n'
        f'graphroot = "{podman_dir / "root"}"\n'
        f'runroot = "{podman_dir / "runroot"}"\n'
    )
    tools = ensure_tools()
    path = os.pathsep.join([str(tools.kubectl.parent), os.environ.get("PATH", "")])
    return dict(
        os.environ,
        KIND_EXPERIMENTAL_PROVIDER="podman",
        CONTAINERS_CONF=str(containers),
        CONTAINERS_STORAGE_CONF=str(storage),
        PATH=path,
    )


def cgroup_v1() -> bool:
    return not Path("/sys/fs/cgroup/cgroup.controllers").exists()


def oom_score_adj_restricted() -> bool:
    """Whether this process may not lower oom_score_adj (as in a container): the node's
    containerd then may not either."""
    path = Path("/proc/self/oom_score_adj")
    current = path.read_text().strip()
    try:
        path.write_text("-999")
    except OSError:
        return True
    path.write_text(current)
    return False


@dataclass
class KindCluster:
    """One kind cluster: `up` makes it and installs the chart; `down` deletes it and what the bed
    made for it; `leftovers` says what of it is still here."""

    name: str = DEFAULT_NAME
    timings: dict[str, float] = field(default_factory=dict)
    _made_modules: bool = False

    @property
    def kubeconfig(self) -> Path:
        return kind_dir() / f"{self.name}.kubeconfig"

    def kind(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        argv = [str(nodeimage.kind_binary()), *args]
        done = subprocess.run(argv, capture_output=True, text=True, env=provider_env(),
                              timeout=timeout)  # fmt: skip
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-40:])
            raise KindError(f"kind {' '.join(args)} exited {done.returncode}:\n{tail}")
        return done

    def podman(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["podman", *args], capture_output=True, text=True,
                              env=provider_env())  # fmt: skip

    def up(self, addons: bool = False) -> OperatorCluster:
        """Node image, cluster, images, chart: returns once the operator is Available. With
        `addons`, the images the node tests install beside it (Kueue's, the user-model
        example's) are loaded too: no registry serves them."""
        t0 = time.monotonic()
        image = nodeimage.build()
        built = podman.build_all()
        if addons:
            built += [kueue_install.build_image(), example.build()]
        self.timings["node image and project images"] = time.monotonic() - t0
        kind_dir().mkdir(parents=True, exist_ok=True)
        if not MODULES.exists():
            (kind_dir() / f"{self.name}.made-lib-modules").touch()
            MODULES.mkdir()
        config = kind_dir() / f"{self.name}.yaml"
        config.write_text(
            parts.cluster_config(
                self.name,
                cgroup_v1=cgroup_v1(),
                restricted_oom_score_adj=oom_score_adj_restricted(),
            )
        )
        t1 = time.monotonic()
        try:
            self.kind("create", "cluster", "--config", str(config), "--image", image,
                      "--kubeconfig", str(self.kubeconfig), "--wait", "180s")  # fmt: skip
            self.timings["kind create cluster"] = time.monotonic() - t1
            cluster = OperatorCluster.existing(self.kubeconfig)
            t2 = time.monotonic()
            for archive in (b.archive for b in built):
                self.kind("load", "image-archive", str(archive), "--name", self.name)
            self.timings["kind load image-archive"] = time.monotonic() - t2
            node = f"{self.name}-control-plane"
            gpus = json.dumps({"status": {"capacity": {"nvidia.com/gpu": str(GPUS)}}})
            cluster.kubectl(
                "patch", "node", node, "--subresource=status", "--type=merge", "-p", gpus
            )
            t3 = time.monotonic()
            install_chart(cluster)
            self.timings["helm install to operator Ready"] = time.monotonic() - t3
        except BaseException:
            self.down()
            raise
        self.timings["total"] = time.monotonic() - t0
        return cluster

    def down(self) -> None:
        """Delete the cluster, kind's network once no cluster is on it, and /lib/modules if
        the bed made it."""
        self.kind("delete", "cluster", "--name", self.name)
        if not self.podman("ps", "-a", "-q", "--filter", f"network={NETWORK}").stdout.strip():
            self.podman("network", "rm", NETWORK)
        marker = kind_dir() / f"{self.name}.made-lib-modules"
        if marker.exists():
            if MODULES.is_dir() and not any(MODULES.iterdir()):
                MODULES.rmdir()
            if not MODULES.exists():
                marker.unlink()
        self.kubeconfig.unlink(missing_ok=True)

    def leftovers(self) -> list[str]:
        """What kind or the bed made for this cluster and left: containers, volumes, kind's
        network and its iptables rules, /lib/modules, mounts of the node's storage."""
        found = []
        label = f"io.x-k8s.kind.cluster={self.name}"
        containers = self.podman("ps", "-a", "--format", "{{.Names}}", "--filter", f"label={label}")
        found += [f"container {c}" for c in containers.stdout.split()]
        node = f"{self.name}-control-plane"
        volumes = self.podman("volume", "ls", "-q", "--filter", f"label={node}")
        found += [f"volume {v}" for v in volumes.stdout.split()]
        if self.podman("network", "exists", NETWORK).returncode == 0:
            found.append(f"podman network {NETWORK}")
        else:  # podman's CNI rules for the network's containers (its shared chains stay)
            rules = subprocess.run(["iptables-save"], capture_output=True, text=True).stdout
            tagged = f'name: \\"{NETWORK}\\"'
            found += [f"iptables {r}" for r in rules.splitlines() if tagged in r]
        if (kind_dir() / f"{self.name}.made-lib-modules").exists():
            found.append(str(MODULES))
        overlay = str(cache_dir() / "podman")
        for line in Path("/proc/mounts").read_text().splitlines():
            point = line.split()[1]
            if point.startswith(overlay) and "/overlay/" in point and "/merged" in point:
                found.append(f"mount {point}")
        return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfjob_testbed.kind.kind_cluster")
    parser.add_argument("action", choices=("up", "down"))
    parser.add_argument("--name", default=DEFAULT_NAME)
    parser.add_argument(
        "--addons", action="store_true", help="load Kueue's and the user-model example's images"
    )
    args = parser.parse_args(argv)
    kind = KindCluster(args.name)
    if args.action == "up":
        # Progress to stderr: stdout is the kubeconfig's path alone, for scripts.
        with contextlib.redirect_stdout(sys.stderr):
            kind.up(addons=args.addons)
        for what, seconds in kind.timings.items():
            print(f"{what}: {seconds:.1f} s", file=sys.stderr)
        print(kind.kubeconfig)
    else:
        kind.down()
        left = kind.leftovers()
        if left:
            print(f"left behind: {', '.join(left)}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
