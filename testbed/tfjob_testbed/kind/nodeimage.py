"""A kind node image of Kubernetes 1.37.2, assembled here from the bed's own parts, as kind's
`build node-image` assembles one from `kindest/base` and registries (neither reachable here).

- A Debian 12 rootfs with kind's base packages and kind's base files, read from kind's module.
- The bed's containerd 2.4.2, Debian's runc, crictl and the CNI plugins built from their
  modules; kubeadm, kubelet and kubectl from the Kubernetes module, and /kind/version.
- Every image kubeadm lists (`kubeadm config images list`), kind's storage images and the CNI's,
  built on podman from the bed's binaries (pause from the Kubernetes module's C source) and
  imported into the node's containerd as kind does (`ctr images import --no-unpack`).
- kind's default StorageClass manifest, read from kind's module; a CNI manifest (`parts`).

The image lives in the bed's podman storage, stamped with a digest of what went into it: a
second build with nothing changed does nothing.

Usage: ``python -m tfjob_testbed.kind.nodeimage`` builds (or checks) it and prints its name.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tfjob_testbed.core import gobuild
from tfjob_testbed.core.pause import compile_pause
from tfjob_testbed.images import debian_base, podman, podman_store
from tfjob_testbed.kind import parts

# Bump when the assembly changes in a way the inputs' digests do not show.
RECIPE = 1
TOOLS_IMAGE = "localhost/tfjob-kind-tools:bookworm"
NODE_REPOSITORY = "localhost/tfjob-operator/kind-node"
ENTRYPOINT = '["/usr/local/bin/entrypoint", "/sbin/init"]'
NODE_CHANGES = (
    "ENV container=docker",
    "STOPSIGNAL SIGRTMIN+3",
    f"ENTRYPOINT {ENTRYPOINT}",
)
# The programs whose commands the node carries or its images are built from.
PROGRAMS = (
    gobuild.KUBERNETES,
    gobuild.KUBERNETES_KIND,
    gobuild.ETCD,
    gobuild.CONTAINERD,
    gobuild.CRI_TOOLS,
    gobuild.CNI_PLUGINS,
    gobuild.COREDNS,
    gobuild.LOCAL_PATH_PROVISIONER,
    gobuild.KIND,
)


def node_image() -> str:
    """The node image's name: kind's repository shape, tagged with the Kubernetes version."""
    return f"{NODE_REPOSITORY}:{gobuild.KUBERNETES.version()}"


def cni_image() -> str:
    return f"{parts.CNI_IMAGE_REPOSITORY}:{gobuild.KIND.version()}"


def kind_binary() -> Path:
    return gobuild.ensure(gobuild.KIND) / "kind"


def build() -> str:
    """The node image, built unless the stamp says the same inputs built the image it names."""
    started = time.monotonic()
    bins: dict[str, Path] = {}
    for program in PROGRAMS:
        directory = gobuild.ensure(program)
        bins |= {command: directory / command for command in program.commands}
    kind_src = gobuild.module_source(gobuild.KIND, "")
    storage = parts.go_string_constants(
        (kind_src / "pkg/build/nodeimage/const_storage.go").read_text()
    )
    storage_images = [storage["storageProvisionerImage"], storage["storageHelperImage"]]
    kubeadm_images = _run_lines(
        [
            str(bins["kubeadm"]),
            "config",
            "images",
            "list",
            "--kubernetes-version",
            gobuild.KUBERNETES.version(),
        ]
    )
    wanted = parts.components(kubeadm_images, storage_images, cni_image())
    pause_image = next(c.image for c in wanted if c.binary == "pause")
    with podman_store.locked():
        tools = _tools_image()
        with tempfile.TemporaryDirectory(dir=podman_store.images_dir(), prefix="kind-") as tmp:
            work = Path(tmp)
            bins["pause"] = compile_pause(work / "pause")
            ids = [_component(c, bins, tools, work) for c in wanted]
            key = _node_key(ids, bins, kind_src)
            tag = node_image()
            built = podman.stamped_build(
                "kind-node",
                key,
                tag,
                lambda: _assemble(work, bins, kind_src, wanted, storage, pause_image),
            )
    print(f"[kind] {tag} ({built[:12]}) ready in {time.monotonic() - started:.0f} s", flush=True)
    return tag


# ---- the pieces -------------------------------------------------------------------------------


def _run_lines(argv: list[str]) -> list[str]:
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return [line for line in done.stdout.splitlines() if line.strip()]


def _digest(*chunks: bytes | str) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk.encode() if isinstance(chunk, str) else chunk)
        digest.update(b"\0")
    return digest.hexdigest()


def _file_digest(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _tools_image() -> str:
    """Debian with a shell, iptables and nftables: kube-proxy's, the CNI's and the storage
    helper's base."""
    packages = ",".join(parts.TOOLS_PACKAGES)

    def make() -> None:
        with tempfile.TemporaryDirectory(dir=podman_store.images_dir(), prefix="rootfs-") as tmp:
            rootfs = Path(tmp) / "rootfs"
            debian_base.debootstrap(rootfs, packages, "kind-tools")
            tar = Path(tmp) / "rootfs.tar"
            debian_base.tar_rootfs(rootfs, tar)
            podman_store.run("import", "--change", "ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin",
                             str(tar), TOOLS_IMAGE)  # fmt: skip

    podman.stamped_build("kind-tools", _digest("tools v1", packages), TOOLS_IMAGE, make)
    return TOOLS_IMAGE


def _component(component: parts.Component, bins: dict[str, Path], tools: str, work: Path) -> str:
    """One image built on podman (or the tools image tagged); returns its ID."""
    base = tools if component.tools else "scratch"
    containerfile = component.containerfile(base)
    binary = bins[component.binary] if component.binary else None
    key = _digest(containerfile, podman_store.image_id(tools) if component.tools else "",
                  _file_digest(binary) if binary else "")  # fmt: skip

    def make() -> None:
        context = work / "ctx" / component.image.replace("/", "_").replace(":", "_")
        context.mkdir(parents=True)
        if binary is not None:
            shutil.copy2(binary, context / binary.name)
            (context / binary.name).chmod(0o755)
        (context / "Containerfile").write_text(containerfile)
        podman_store.run("build", "--pull=never", "--tag", component.image, str(context))

    return podman.stamped_build(f"kind-{_slug(component.image)}", key, component.image, make)


def _slug(image: str) -> str:
    return image.rsplit("/", 1)[-1].split(":", 1)[0]


def _node_key(ids: list[str], bins: dict[str, Path], kind_src: Path) -> str:
    files = sorted(p for p in (kind_src / "images/base/files").rglob("*") if p.is_file())
    return _digest(
        f"node v{RECIPE}",
        repr(parts.NODE_PACKAGES),
        parts.cni_manifest(cni_image()),
        *ids,
        *(_file_digest(bins[name]) for name in sorted(bins)),
        *(_file_digest(p) for p in files),
    )


def _assemble(
    work: Path,
    bins: dict[str, Path],
    kind_src: Path,
    wanted: list[parts.Component],
    storage: dict[str, str],
    pause_image: str,
) -> None:
    rootfs = work / "node"
    debian_base.debootstrap(rootfs, ",".join(parts.NODE_PACKAGES), "kind-node")
    _base_files(rootfs, kind_src, bins, pause_image)
    _programs(rootfs, bins)
    _write(rootfs, parts.VERSION_FILE, gobuild.KUBERNETES.version())
    _write(rootfs, parts.CNI_MANIFEST, parts.cni_manifest(cni_image()))
    _write(rootfs, parts.STORAGE_MANIFEST, storage["defaultStorageManifest"])
    _import_images(rootfs, bins, [c.image for c in wanted], work)
    tar = work / "node.tar"
    debian_base.tar_rootfs(rootfs, tar)
    changes = [arg for change in NODE_CHANGES for arg in ("--change", change)]
    podman_store.run("import", *changes, str(tar), node_image())


def _write(rootfs: Path, path: str, text: str, mode: int = 0o644) -> None:
    target = rootfs / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    target.chmod(mode)


def _chroot(rootfs: Path, *argv: str) -> None:
    subprocess.run(["chroot", str(rootfs), *argv], check=True, capture_output=True)


def _base_files(rootfs: Path, kind_src: Path, bins: dict[str, Path], pause_image: str) -> None:
    """kind's images/base/files and the steps of its Dockerfile that set systemd up."""
    files = kind_src / "images/base/files"
    for source in sorted(p for p in files.rglob("*") if p.is_file()):
        rel = source.relative_to(files).as_posix()
        executable = rel.startswith(("usr/local/bin/", "kind/bin/"))
        _write(rootfs, rel, source.read_text(), 0o755 if executable else 0o644)
    config = rootfs / "etc/containerd/config.toml"
    config.write_text(parts.containerd_config(config.read_text(), pause_image))
    spec = json.loads(_run_text([str(bins["ctr"]), "oci", "spec"]))
    _write(rootfs, "etc/containerd/cri-base.json", json.dumps(parts.cri_base_spec(spec), indent=2))
    for wants in ("multi-user.target.wants", "local-fs.target.wants", "basic.target.wants"):
        for unit in (rootfs / "lib/systemd/system" / wants).glob("*"):
            unit.unlink()
    for pattern in ("*udev*", "*initctl*"):
        for unit in (rootfs / "lib/systemd/system/sockets.target.wants").glob(pattern):
            unit.unlink()
    for unit in (rootfs / "etc/systemd/system").glob("*.wants/*"):
        unit.unlink()
    tmpfiles = rootfs / "lib/systemd/system/sysinit.target.wants/systemd-tmpfiles-setup.service"
    tmpfiles.unlink(missing_ok=True)
    with (rootfs / "etc/systemd/journald.conf").open("a") as journald:
        journald.write("ReadKMsg=no\n")
    init = rootfs / "sbin/init"
    if not init.exists():
        init.symlink_to("/usr/lib/systemd/systemd")
    _chroot(rootfs, "systemctl", "enable", "kubelet.service", "containerd.service",
            "undo-mount-hacks.service")  # fmt: skip
    _chroot(rootfs, "systemctl", "mask", "systemd-binfmt.service")
    (rootfs / "etc/kubernetes/manifests").mkdir(parents=True, exist_ok=True)


def _programs(rootfs: Path, bins: dict[str, Path]) -> None:
    placed = {
        "usr/local/bin": ("containerd", "containerd-shim-runc-v2", "ctr", "crictl"),
        "opt/cni/bin": tuple(gobuild.CNI_PLUGINS.commands),
        # kind's kubelet.service runs /usr/bin/kubelet.
        "usr/bin": ("kubeadm", "kubelet", "kubectl"),
    }
    for folder, names in placed.items():
        (rootfs / folder).mkdir(parents=True, exist_ok=True)
        for name in names:
            shutil.copy2(bins[name], rootfs / folder / name)
            (rootfs / folder / name).chmod(0o755)


def _run_text(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def _import_images(rootfs: Path, bins: dict[str, Path], images: list[str], work: Path) -> None:
    """The images into the node's containerd store, unpacked at first use, as kind imports
    them: the bed's containerd runs on this host over the rootfs's /var/lib/containerd."""
    archive = work / "images.tar"
    podman_store.run("save", "--multi-image-archive", "--format", "docker-archive",
                     "--output", str(archive), *images)  # fmt: skip
    with _containerd(rootfs, bins, work) as address:
        ctr = [str(bins["ctr"]), "--address", address, "--namespace", "k8s.io"]
        subprocess.run(
            [*ctr, "images", "import", "--label=io.cri-containerd.pinned=pinned",
             "--all-platforms", "--no-unpack", "--digests", str(archive)],
            check=True, capture_output=True,
        )  # fmt: skip
        listed = set(_run_text([*ctr, "images", "list", "-q"]).split())
    missing = [image for image in images if _qualified(image) not in listed]
    if missing:
        raise podman_store.ImageError(f"not imported into the node's containerd: {missing}")


def _qualified(image: str) -> str:
    return image if "." in image.split("/", 1)[0] else f"docker.io/{image}"


@contextlib.contextmanager
def _containerd(rootfs: Path, bins: dict[str, Path], work: Path) -> Iterator[str]:
    state = work / "containerd-state"
    state.mkdir()
    address = str(state / "containerd.sock")
    config = work / "containerd.toml"
    config.write_text(
        "version = 3\n"
        f'root = "{rootfs / "var/lib/containerd"}"\n'
        f'state = "{state}"\n'
        # Only the content store is used: nothing that runs containers, or writes to this host.
        'disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.images",'
        ' "io.containerd.cri.v1.runtime", "io.containerd.nri.v1.nri",'
        ' "io.containerd.internal.v1.opt"]\n'
        f'[grpc]\n  address = "{address}"\n'
        f'[ttrpc]\n  address = "{address}.ttrpc"\n'
    )
    log = (work / "containerd.log").open("w")
    proc = subprocess.Popen([str(bins["containerd"]), "--config", str(config)], stdout=log,
                            stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while subprocess.run([str(bins["ctr"]), "--address", address, "version"],
                             capture_output=True).returncode != 0:  # fmt: skip
            if proc.poll() is not None or time.monotonic() > deadline:
                raise podman_store.ImageError(f"containerd did not serve {address}: see {log.name}")
            time.sleep(0.2)
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
        with contextlib.suppress(OSError):
            os.unlink(address)


def main() -> int:
    print(build())
    return 0


if __name__ == "__main__":
    sys.exit(main())
