"""The bed's Go programs, built from their Go modules: Kubernetes (the newest release the bed
runs, and the oldest one the project claims), etcd, containerd, Kueue's manager and Kubeflow's
training-operator.

Each program has a folder in `testbed/go/` whose `go.mod` and `go.sum` pin it (tools only,
never shipped). Only its commands are built, with `-trimpath` and no tests, into
`<cache>/<name>-<version>/bin`, stamped with a digest of the recipe: a second build with
nothing changed builds nothing. Go's module and build caches live in `<cache>/go`, so a
rebuild after a recipe change compiles only what changed.

Usage: ``python -m tfjob_testbed.core.gobuild [NAME...]`` builds (or checks) them and prints paths.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tfjob_testbed.core.paths import ROOT, cache_dir

MODULES = ROOT / "testbed" / "go"
# Bump when the way programs are built changes, so cached binaries are rebuilt.
RECIPE = 1


class BuildError(RuntimeError):
    """A Go build failed; the message carries the tail of its log."""


@dataclass(frozen=True)
class Program:
    """One folder of `testbed/go`: the module it builds and the commands it takes from it."""

    name: str  # the folder, and the cache entry's name
    module: str  # the required module whose version names the build
    commands: dict[str, str]  # binary name -> package
    # -X flags, as "{version}"-templated values keyed by variable.
    stamps: dict[str, str]
    tags: tuple[str, ...] = ()
    # An older toolchain, for an old release whose dependencies a newer Go refuses.
    toolchain: str | None = None

    @property
    def folder(self) -> Path:
        return MODULES / self.name

    def version(self) -> str:
        """The module's version, as `go.mod` requires it."""
        text = (self.folder / "go.mod").read_text()
        match = re.search(rf"^\s*(?:require\s+)?{re.escape(self.module)} (v\S+)", text, re.M)
        if not match:
            raise BuildError(f"{self.folder / 'go.mod'} does not require {self.module}")
        return match.group(1)

    def bin_dir(self) -> Path:
        return cache_dir() / f"{self.name}-{self.version()}" / "bin"

    def path(self, command: str) -> Path:
        """A built command (build it first: `ensure`)."""
        return self.bin_dir() / command

    def recipe(self) -> str:
        """What the binaries depend on: the pinned modules and how they are built."""
        digest = hashlib.sha256()
        for name in ("go.mod", "go.sum"):
            digest.update((self.folder / name).read_bytes())
        recipe = (RECIPE, self.commands, self.stamps, self.tags, self.toolchain)
        digest.update(repr(recipe).encode())
        return f"{self.name} {self.version()} {digest.hexdigest()[:16]}\n"

    def built(self) -> bool:
        stamp = self.bin_dir() / ".stamp"
        return (
            stamp.is_file()
            and stamp.read_text() == self.recipe()
            and all(os.access(self.path(c), os.X_OK) for c in self.commands)
        )

    def ldflags(self) -> str:
        version = self.version()
        minor = version.split(".")[1]
        flags = ["-s", "-w"]
        for variable, value in self.stamps.items():
            flags.append(f"-X {variable}={value.format(version=version, minor=minor)}")
        return " ".join(flags)


def _kubernetes_stamps() -> dict[str, str]:
    """The version `--version`, `kubectl version` and the nodes report (a build from a module
    otherwise says v0.0.0-master)."""
    stamps: dict[str, str] = {}
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        stamps |= {
            f"{package}.gitVersion": "{version}",
            f"{package}.gitMajor": "1",
            f"{package}.gitMinor": "{minor}",
            f"{package}.gitTreeState": "clean",
        }
    return stamps


_KUBE = "k8s.io/kubernetes/cmd/"
KUBERNETES = Program(
    name="kubernetes",
    module="k8s.io/kubernetes",
    commands={
        name: _KUBE + name
        for name in (
            "kube-apiserver",
            "kube-controller-manager",
            "kube-scheduler",
            "kubelet",
            "kube-proxy",
        )
    },
    stamps=_kubernetes_stamps(),
)
# The oldest release the README claims: the API-server tests run on it too.
KUBERNETES_OLDEST = Program(
    name="kubernetes-oldest",
    module="k8s.io/kubernetes",
    commands={name: _KUBE + name for name in ("kube-apiserver", "kube-controller-manager")},
    stamps=_kubernetes_stamps(),
    toolchain="go1.22.12",
)
ETCD = Program(
    name="etcd",
    module="go.etcd.io/etcd/server/v3",
    commands={"etcd": "go.etcd.io/etcd/server/v3"},
    stamps={},
)
CONTAINERD = Program(
    name="containerd",
    module="github.com/containerd/containerd/v2",
    commands={
        name: f"github.com/containerd/containerd/v2/cmd/{name}"
        for name in ("containerd", "containerd-shim-runc-v2", "ctr")
    },
    stamps={"github.com/containerd/containerd/v2/version.Version": "{version}"},
    # Snapshotters that need C headers; the bed uses overlayfs.
    tags=("no_btrfs", "no_devmapper", "no_zfs"),
)
# Kueue's manager, for its image (tfjob_testbed.addons.kueue_install); its chart and CRDs are
# read from the same module.
KUEUE = Program(
    name="kueue",
    module="sigs.k8s.io/kueue",
    commands={"manager": "sigs.k8s.io/kueue/cmd/kueue"},
    stamps={"sigs.k8s.io/kueue/pkg/version.GitVersion": "{version}"},
)
# Kubeflow's training-operator (the v1 TFJob controller), the peer `benchmarks/operator_scale.py`
# measures ours beside (tfjob_testbed.addons.peer); its TFJob CRD is read from the same module.
TRAINING_OPERATOR = Program(
    name="training-operator",
    module="github.com/kubeflow/training-operator",
    commands={
        "training-operator": "github.com/kubeflow/training-operator/cmd/training-operator.v1"
    },
    stamps={},
)
# What a kind node image holds beside the programs above (tfjob_testbed.kind.nodeimage): kind
# itself, kubeadm and kubectl, crictl, the CNI plugins kind's base image carries, and the
# programs behind the images kubeadm and kind start.
KIND = Program(
    name="kind",
    module="sigs.k8s.io/kind",
    commands={"kind": "sigs.k8s.io/kind"},
    stamps={},
)
KUBERNETES_KIND = Program(
    name="kubernetes-kind",
    module="k8s.io/kubernetes",
    commands={name: _KUBE + name for name in ("kubeadm", "kubectl")},
    stamps=_kubernetes_stamps(),
)
CRI_TOOLS = Program(
    name="cri-tools",
    module="sigs.k8s.io/cri-tools",
    commands={"crictl": "sigs.k8s.io/cri-tools/cmd/crictl"},
    stamps={"sigs.k8s.io/cri-tools/pkg/version.Version": "{version}"},
)
_CNI = "github.com/containernetworking/plugins/plugins/"
CNI_PLUGINS = Program(
    name="cni-plugins",
    module="github.com/containernetworking/plugins",
    commands={
        "host-local": _CNI + "ipam/host-local",
        "loopback": _CNI + "main/loopback",
        "ptp": _CNI + "main/ptp",
        "portmap": _CNI + "meta/portmap",
    },
    stamps={},
)
COREDNS = Program(
    name="coredns",
    module="github.com/coredns/coredns",
    commands={"coredns": "github.com/coredns/coredns"},
    stamps={},
)
LOCAL_PATH_PROVISIONER = Program(
    name="local-path-provisioner",
    module="github.com/rancher/local-path-provisioner",
    commands={"local-path-provisioner": "github.com/rancher/local-path-provisioner"},
    stamps={},
)
# Katib's controller, its db-manager, the goptuna suggestion service and the file metrics
# collector, for their images (tfjob_testbed.addons.katib); its manifests are read from the same
# module.
_KATIB = "github.com/kubeflow/katib/cmd/"
KATIB = Program(
    name="katib",
    module="github.com/kubeflow/katib",
    commands={
        "katib-controller": _KATIB + "katib-controller/v1beta1",
        "katib-db-manager": _KATIB + "db-manager/v1beta1",
        "goptuna-suggestion": _KATIB + "suggestion/goptuna/v1beta1",
        "file-metricscollector": _KATIB + "metricscollector/v1beta1/file-metricscollector",
    },
    stamps={},
)
PROGRAMS = {
    p.name: p
    for p in (
        KUBERNETES,
        ETCD,
        CONTAINERD,
        KUBERNETES_OLDEST,
        KUEUE,
        KATIB,
        KIND,
        KUBERNETES_KIND,
        CRI_TOOLS,
        CNI_PLUGINS,
        COREDNS,
        LOCAL_PATH_PROVISIONER,
        TRAINING_OPERATOR,
    )
}
# What the tests stand on, built by `make setup`; the benchmarks' peer is built when they first
# need it (`make bench`), not by every new machine.
BED = [name for name in PROGRAMS if name != TRAINING_OPERATOR.name]


def _go() -> str:
    """The machine's Go: on PATH, else where Go's own installer puts it."""
    found = shutil.which("go") or shutil.which("go", path="/usr/local/go/bin")
    if found is None:
        raise BuildError("no Go found (PATH, /usr/local/go/bin): the bed builds from Go modules")
    return found


def _go_env(program: Program) -> dict[str, str]:
    go = cache_dir() / "go"
    env = dict(
        os.environ,
        GOMODCACHE=str(go / "mod"),
        GOCACHE=str(go / "build"),
        GOFLAGS="-mod=readonly -buildvcs=false",
        CGO_ENABLED="0",
        GOWORK="off",
    )
    if program.toolchain:
        env["GOTOOLCHAIN"] = program.toolchain
    return env


def _build(program: Program) -> None:
    out = program.bin_dir()
    staging = out.with_name("bin.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    log = out.with_name("build.log")
    env = _go_env(program)
    go = _go()
    started = time.monotonic()
    print(f"[gobuild] {program.name} {program.version()}: building "
          f"{', '.join(program.commands)} (log: {log})", flush=True)  # fmt: skip
    with log.open("w") as sink:
        for command, package in program.commands.items():
            argv = [go, "build", "-trimpath", "-ldflags", program.ldflags(),
                    "-o", str(staging / command)]  # fmt: skip
            if program.tags:
                argv += ["-tags", ",".join(program.tags)]
            sink.write(f"$ {' '.join(argv)} {package}\n")
            sink.flush()
            proc = subprocess.run(
                [*argv, package], cwd=program.folder, env=env, stdout=sink, stderr=sink
            )
            if proc.returncode != 0:
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
                raise BuildError(f"go build {package} failed ({proc.returncode}):\n{tail}")
    (staging / ".stamp").write_text(program.recipe())
    shutil.rmtree(out, ignore_errors=True)
    staging.rename(out)
    print(f"[gobuild] {program.name}: built in {time.monotonic() - started:.0f} s", flush=True)


def ensure(program: Program) -> Path:
    """The program's bin directory, built first unless the cache holds this recipe."""
    if program.built():
        return program.bin_dir()
    root = program.bin_dir().parent
    root.mkdir(parents=True, exist_ok=True)
    # Parallel test workers may race here: one builds, the others wait.
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not program.built():
            _build(program)
    return program.bin_dir()


def module_source(program: Program, path: str) -> Path:
    """A file of the program's module, as the module cache holds it (downloaded if needed)."""
    proc = subprocess.run(
        [_go(), "mod", "download", "-json", f"{program.module}@{program.version()}"],
        cwd=program.folder,
        env=_go_env(program),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise BuildError(f"go mod download {program.module} failed:\n{proc.stdout}{proc.stderr}")
    return Path(json.loads(proc.stdout)["Dir"]) / path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tfjob_testbed.core.gobuild", description=__doc__
    )
    parser.add_argument(
        "names", nargs="*", help=f"of {', '.join(PROGRAMS)} (default: {', '.join(BED)})"
    )
    args = parser.parse_args(argv)
    unknown = set(args.names) - set(PROGRAMS)
    if unknown:
        parser.error(f"unknown: {', '.join(sorted(unknown))}")
    for name in args.names or BED:
        program = PROGRAMS[name]
        print(f"{name} {program.version()}: {ensure(program)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
