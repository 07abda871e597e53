"""The operator and trainer images, built from the project's Dockerfile by podman, here.

No registry is reachable, so the Dockerfile's base (python:3.11-slim) is replaced by a local
stand-in: Debian bookworm's own Python 3.11 from debootstrap, imported into podman. podman keeps
its own storage under the cache, so nothing here touches the host's containers or networks.
Everything is cached: a second run with no change does no work, and a code-only change
rebuilds only the layers that copy the code.

Usage::

    python -m tfjob_testbed.images.podman build      # base (once), both images, both archives
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tfjob_testbed.core.paths import ROOT, cache_dir

DOCKERFILE = ROOT / "Dockerfile"
CHART = ROOT / "charts" / "tfjob-operator" / "Chart.yaml"
BASE_IMAGE = "localhost/tfjob-base:bookworm-py311"
REPOSITORY = "docker.io/tfjob-operator"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# The hard nofile limit here is 20000, above what runc may set by default; these fit under it.
ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")

# Everything that decides the stand-in base: change any of it and the base is made again.
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
BASE_SUITE = "bookworm"
BASE_CHANGES = (
    "ENV LANG=C.UTF-8",
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    'CMD ["python3"]',
)
BASE_RECIPE = "\n".join(["base v1", BASE_SUITE, "minbase", BASE_PACKAGES, *BASE_CHANGES])


class ImageError(RuntimeError):
    """A base, build or save step failed; the message carries the command's output tail."""


@dataclass(frozen=True)
class BuiltImage:
    """One built image: all its tags, its podman image ID and a `podman save` archive of it."""

    tags: tuple[str, ...]
    image_id: str
    archive: Path

    @property
    def name(self) -> str:
        """The first tag, e.g. docker.io/tfjob-operator/operator:0.1.0."""
        return self.tags[0]


def images_dir() -> Path:
    """Where the base rootfs, archives, stamps and podman's storage live."""
    return cache_dir() / "images"


def podman_command() -> list[str]:
    """`podman` with this cache's private storage and the settings that work on this host.

    runc, not crun (crun fails on this cgroup v1 hybrid); cgroupfs, as there may be no systemd;
    file events, as there may be no journald.
    """
    podman_dir = cache_dir() / "podman"
    return [
        "podman",
        "--root",
        str(podman_dir / "root"),
        "--runroot",
        str(podman_dir / "runroot"),
        "--runtime",
        shutil.which("runc", path="/usr/sbin:/usr/bin:/sbin:/bin") or "runc",
        "--cgroup-manager",
        "cgroupfs",
        "--events-backend",
        "file",
    ]


def missing_prerequisites() -> str | None:
    """Why images cannot be built on this machine, or None when they can."""
    if os.geteuid() != 0:
        return "building images needs root (debootstrap, podman with private storage)"
    for tool in ("podman", "debootstrap", "runc", "tar"):
        if shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
            return f"{tool} is not installed (apt-get install podman debootstrap runc)"
    return None


def app_version() -> str:
    """The chart's appVersion: the tag the chart and the example manifests use."""
    match = re.search(r"(?m)^appVersion:\s*[\"']?([^\"'\s]+)", CHART.read_text())
    if match is None:
        raise ImageError(f"{CHART}: no appVersion")
    return match[1]


def image_tags() -> dict[str, tuple[str, ...]]:
    """Dockerfile target -> its tags, fully qualified as containerd names them."""
    version = app_version()
    return {
        "operator": (f"{REPOSITORY}/operator:{version}",),
        # The GPU example's tag names the same CPU image: this test bed has no GPU.
        "trainer": (f"{REPOSITORY}/trainer:{version}", f"{REPOSITORY}/trainer:{version}-gpu"),
    }


def image_id(image: str) -> str:
    """The full image ID (sha256 hex, no prefix) that `image` (a tag or an ID) names now."""
    done = run("image", "inspect", "--format", "{{.Id}}", image)
    return done.stdout.strip()


def ensure_base() -> str:
    """Make and import the stand-in base once; return its name for --build-arg BASE_IMAGE."""
    with locked():
        return _ensure_base()


def build(target: str, tags: Sequence[str]) -> str:
    """`podman build --target TARGET` on the stand-in base, with cached layers; return its ID.

    When nothing the build reads has changed (the files .dockerignore lets through, the
    Dockerfile, the base image) and the tags still name the image built last time, podman is not
    run at all: even a fully cached build re-copies the trainer's 1.5 GB venv to check its cache.
    """
    with locked():
        base = _ensure_base()
        stamp = images_dir() / f"{target}.stamp"
        key = _build_key(target, tags, image_id(base))
        stamped_key, _, stamped_id = (stamp.read_text() if stamp.exists() else "").partition(" ")
        stamped_id = stamped_id.strip()
        if stamped_key == key and all(_quiet_id(tag) == stamped_id for tag in tags):
            return stamped_id
        cmd = [
            "build",
            "--file",
            str(DOCKERFILE),
            "--target",
            target,
            "--build-arg",
            f"BASE_IMAGE={base}",
            "--layers",
            "--pull=never",
            "--network=host",
            # The HTTPS proxy's CA is only in the host's bundle; pip in the base reads that path.
            "--volume",
            f"{HOST_CA_BUNDLE}:{HOST_CA_BUNDLE}:ro",
            *ULIMITS,
        ]
        for tag in tags:
            cmd += ["--tag", tag]
        run(*cmd, str(ROOT), log=images_dir() / "logs" / f"build-{target}.log")
        built = image_id(tags[0])
        stamp.write_text(f"{key} {built}\n")
        if stamped_id and stamped_id != built:
            _drop_untagged(stamped_id)
        return built


def stamped_build(name: str, key: str, tag: str, run_build: Callable[[], object]) -> str:
    """An image built by `run_build` under `tag`, unless the stamp `<name>.stamp` says the same
    `key` built the image the tag still names; returns its ID. A rebuild drops the image it
    replaced. Call it holding the build lock (`locked`)."""
    stamp = images_dir() / f"{name}.stamp"
    stamped_key, _, stamped_id = (stamp.read_text() if stamp.exists() else "").partition(" ")
    stamped_id = stamped_id.strip()
    if stamped_key == key and _quiet_id(tag) == stamped_id:
        return stamped_id
    run_build()
    built = image_id(tag)
    stamp.write_text(f"{key} {built}\n")
    if stamped_id and stamped_id != built:
        _drop_untagged(stamped_id)
    return built


PROGRAM_CONTAINERFILE = """FROM {base}
WORKDIR {workdir}
COPY {name} {path}
USER {user}
ENTRYPOINT ["{path}"]
"""


def program_containerfile(base: str, name: str, workdir: str, user: str) -> str:
    """The Containerfile of one program's image: in `workdir`, run as `user`."""
    path = PurePosixPath(workdir, name)
    return PROGRAM_CONTAINERFILE.format(base=base, workdir=workdir, name=name, path=path, user=user)


def program_image(binary: Path, tag: str, workdir: str = "/", user: str = "0:0") -> BuiltImage:
    """One program (a Go build of the bed's) in an image on the bed's base, as its project's
    own image lays it out (`workdir`, `user`), saved for `ctr images import`; nothing is rebuilt
    while the binary, the layout and the base are unchanged."""
    name = binary.name
    stamp_name = tag.rsplit("/", 1)[-1].split(":", 1)[0]
    containerfile = program_containerfile(BASE_IMAGE, name, workdir, user)
    with locked():
        base = _ensure_base()
        digest = hashlib.sha256(f"program v1\0{tag}\0{image_id(base)}\0".encode())
        digest.update(containerfile.encode())
        digest.update(hashlib.sha256(binary.read_bytes()).digest())

        def run_build() -> None:
            _build_context(containerfile, {name: (binary.read_bytes(), 0o755)}, tag, stamp_name)

        built = stamped_build(stamp_name, digest.hexdigest(), tag, run_build)
        return BuiltImage((tag,), built, _archive(built))


def _build_context(
    containerfile: str, files: Mapping[str, tuple[bytes, int]], tag: str, log_name: str
) -> None:
    """Build `containerfile` under `tag` in a context of `files` (name -> (bytes, mode)), with
    no network and no pull: from images the bed has."""
    with tempfile.TemporaryDirectory() as context:
        for file_name, (data, mode) in files.items():
            (Path(context) / file_name).write_bytes(data)
            (Path(context) / file_name).chmod(mode)
        (Path(context) / "Containerfile").write_text(containerfile)
        run(
            "build", "--file", str(Path(context) / "Containerfile"), "--pull=never",
            "--network=none", *ULIMITS, "--tag", tag, context,
            log=images_dir() / "logs" / f"build-{log_name}.log",
        )  # fmt: skip


def derived_image(image: str, tag: str, files: Mapping[str, str]) -> BuiltImage:
    """`image` (built by the bed) with text `files` added at their absolute paths, readable
    by all, under `tag`, saved for `ctr images import`: another build of a project image, as a
    test needs one (an operator that renders pods otherwise). Cached on its inputs."""
    stamp_name = tag.rsplit("/", 1)[-1].replace(":", "-")
    lines = [f"FROM {image}"]
    lines += [f"COPY f{i} {dest}" for i, dest in enumerate(files)]
    containerfile = "\n".join(lines) + "\n"
    with locked():
        digest = hashlib.sha256(f"derived v1\0{tag}\0{image_id(image)}\0".encode())
        digest.update(containerfile.encode())
        digest.update(json.dumps(dict(files), sort_keys=True).encode())

        def run_build() -> None:
            context = {f"f{i}": (text.encode(), 0o644) for i, text in enumerate(files.values())}
            _build_context(containerfile, context, tag, stamp_name)

        built = stamped_build(stamp_name, digest.hexdigest(), tag, run_build)
        # Archived under its own name: the image it derives from keeps its archive.
        return BuiltImage((tag,), built, _archive(built, stamp_name))


def archive(image: str) -> Path:
    """Save an image, with all its tags, to a docker-archive for `ctr images import`.

    The file is images_dir()/<name>-<12 hex of the image ID>.tar, reused while the image ID is
    unchanged; older archives of the same name are removed. It is written from an OCI layout
    under images_dir()/oci that podman updates with the layers it lacks (_save_layout).
    """
    with locked():
        return _archive(image)


def build_all() -> list[BuiltImage]:
    """Build the operator and trainer images (cached) and save each to an archive."""
    with locked():
        built = []
        for target, tags in image_tags().items():
            built_id = build(target, tags)
            built.append(BuiltImage(tags, built_id, _archive(built_id)))
        return built


# ---- internals --------------------------------------------------------------------------------

_thread_lock = threading.RLock()
_depth = 0


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """One build at a time across processes (a file lock); re-entrant within this process."""
    global _depth
    with _thread_lock:
        if _depth:
            _depth += 1
            try:
                yield
            finally:
                _depth -= 1
            return
        images_dir().mkdir(parents=True, exist_ok=True)
        with open(images_dir() / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _depth = 1
            try:
                yield
            finally:
                _depth = 0


def run(*args: str, log: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run podman with the private storage; raise ImageError with the output tail on failure.

    With `log`, the output goes there as it comes (a cold build runs for minutes: tail it).
    """
    cmd = [*podman_command(), *args]
    if log is None:
        done = subprocess.run(cmd, capture_output=True, text=True)
        output = done.stdout + done.stderr
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as out:
            done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
        output = log.read_text(errors="replace")
    if done.returncode != 0:
        tail = "\n".join(output.splitlines()[-30:])
        raise ImageError(f"{' '.join(cmd)} exited {done.returncode}:\n{tail}")
    return done


def _build_key(target: str, tags: Sequence[str], base_id: str) -> str:
    """A digest of everything a build reads: same key, same image."""
    digest = hashlib.sha256(f"build v1\0{target}\0{' '.join(tags)}\0{base_id}\0".encode())
    for rel in ["Dockerfile", ".dockerignore", *_context_files()]:
        path = ROOT / rel
        if path.is_symlink():
            content = os.readlink(path).encode()
        else:
            content = path.read_bytes() if path.exists() else b"(missing)"
        mode = path.lstat().st_mode if path.exists() or path.is_symlink() else 0
        digest.update(f"{rel}\0{mode:o}\0".encode())
        digest.update(hashlib.sha256(content).digest())
    return digest.hexdigest()


def _context_files() -> list[str]:
    """Paths (relative, sorted) of the build context: what .dockerignore lets through."""
    patterns = _dockerignore()
    found = []
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = Path(dirpath).relative_to(ROOT)
        kept = []
        for name in sorted(dirnames):
            rel = (rel_dir / name).as_posix()
            if (ROOT / rel).is_symlink():
                filenames.append(name)  # os.walk does not follow it; the build copies the link
            elif not _prunable(rel, patterns):
                kept.append(name)
        dirnames[:] = kept
        for name in filenames:
            rel = (rel_dir / name).as_posix()
            if not _ignored(rel, patterns):
                found.append(rel)
    return sorted(found)


def _dockerignore() -> list[tuple[bool, str, re.Pattern[str]]]:
    """(negated, pattern, regex) per .dockerignore line, in order: the last match wins."""
    path = ROOT / ".dockerignore"
    lines = path.read_text().splitlines() if path.exists() else []
    patterns = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).strip("/")
        patterns.append((negated, pattern, _glob_regex(pattern)))
    return patterns


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Docker's .dockerignore glob: * and ? stay within a path segment, ** crosses them."""
    out = ""
    for token in re.split(r"(\*\*/|\*\*|\*|\?|\[[^\]/]+\])", pattern):
        if token.startswith("[") and token.endswith("]"):
            body = token[1:-1]
            out += "[^" + re.escape(body[1:]) + "]" if body.startswith("^") else f"[{body}]"
        else:
            out += {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(
                token, re.escape(token)
            )
    return re.compile(out)


def _ignored(rel: str, patterns: list[tuple[bool, str, re.Pattern[str]]]) -> bool:
    """Whether .dockerignore keeps `rel` out: a pattern matching it or a parent applies."""
    parts = rel.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for negated, _, regex in patterns:
        if any(regex.fullmatch(c) for c in candidates):
            excluded = not negated
    return excluded


def _prunable(rel_dir: str, patterns: list[tuple[bool, str, re.Pattern[str]]]) -> bool:
    """An ignored directory no `!pattern` could reach into: nothing under it is sent."""
    if not _ignored(rel_dir, patterns):
        return False
    for negated, pattern, _ in patterns:
        literal = re.split(r"[*?\[]", pattern, maxsplit=1)[0]
        if negated and (
            pattern.startswith(rel_dir + "/")
            or (literal != pattern and (rel_dir + "/").startswith(literal))
        ):
            return False
    return True


def _recipe_hash() -> str:
    return hashlib.sha256(BASE_RECIPE.encode()).hexdigest()[:16]


def _mirror() -> str:
    """The host's Debian mirror (deb822 sources), so debootstrap uses what apt already reaches."""
    if DEBIAN_SOURCES.exists():
        for block in DEBIAN_SOURCES.read_text().split("\n\n"):
            fields = dict(
                line.split(":", 1) for line in block.splitlines() if re.match(r"^[A-Za-z-]+:", line)
            )
            suites = fields.get("Suites", "").split()
            if BASE_SUITE in suites and "URIs" in fields:
                return fields["URIs"].split()[0]
    return DEFAULT_MIRROR


def _ensure_base() -> str:
    """The rootfs tar (debootstrap) and its import, each redone only when its stamp is stale."""
    stamp = images_dir() / "base.stamp"
    rootfs_tar = images_dir() / "base-rootfs.tar"
    recipe = _recipe_hash()
    stamped = stamp.read_text().split() if stamp.exists() else []
    if stamped[:1] == [recipe] and rootfs_tar.exists():
        current = _quiet_id(BASE_IMAGE)
        if current is not None and stamped[1:] == [current]:
            return BASE_IMAGE
    else:
        _debootstrap(rootfs_tar)
    changes = [arg for change in BASE_CHANGES for arg in ("--change", change)]
    run("import", *changes, str(rootfs_tar), BASE_IMAGE)
    stamp.write_text(f"{recipe} {image_id(BASE_IMAGE)}\n")
    return BASE_IMAGE


def _drop_untagged(old_id: str) -> None:
    """Remove an image the last build replaced, if nothing names it any more.

    Its parents that nothing else builds on go with it (a trainer code change leaves a 1.5 GB
    layer behind otherwise); the layer cache of the current images has children and stays.
    """
    names = subprocess.run(
        [*podman_command(), "image", "inspect", "--format", "{{len .RepoTags}}", old_id],
        capture_output=True,
        text=True,
    )
    if names.returncode == 0 and names.stdout.strip() == "0":
        subprocess.run([*podman_command(), "rmi", old_id], capture_output=True)


def _quiet_id(image: str) -> str | None:
    done = subprocess.run(
        [*podman_command(), "image", "inspect", "--format", "{{.Id}}", image],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def _debootstrap(rootfs_tar: Path) -> None:
    """A minimal bookworm with Debian's Python 3.11, `python` on PATH and no apt caches."""
    with tempfile.TemporaryDirectory(dir=images_dir(), prefix="rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        debootstrap(rootfs, BASE_PACKAGES, "debootstrap")
        (rootfs / "usr/local/bin/python").symlink_to("/usr/bin/python3")
        tar_rootfs(rootfs, rootfs_tar)


def debootstrap(rootfs: Path, packages: str, name: str) -> None:
    """A minimal bookworm with `packages` (comma-separated) from the host's mirror, and no apt
    caches; its log is images_dir()/logs/<name>.log."""
    log = images_dir() / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["debootstrap", "--variant=minbase", f"--include={packages}", BASE_SUITE,
           str(rootfs), _mirror()]  # fmt: skip
    with log.open("w") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = "\n".join(log.read_text().splitlines()[-30:])
        raise ImageError(f"{' '.join(cmd)} exited {done.returncode}:\n{tail}")
    subprocess.run(["chroot", str(rootfs), "apt-get", "clean"], check=True)
    for leftover in (rootfs / "var/lib/apt/lists").glob("*_*"):
        leftover.unlink()


def tar_rootfs(rootfs: Path, rootfs_tar: Path) -> None:
    """The rootfs as a tar for `podman import`, written whole or not at all."""
    partial = rootfs_tar.with_suffix(".tar.partial")
    # debootstrap leaves device nodes in /dev: the runtime provides its own.
    excludes = ["--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*"]
    tar = ["tar", "-C", str(rootfs), "--numeric-owner", "--xattrs", *excludes]
    subprocess.run([*tar, "-cf", str(partial), "."], check=True)
    partial.replace(rootfs_tar)


def _archive(image: str, archive_name: str | None = None) -> Path:
    """`archive`; `archive_name` (default: the first tag's repository) names the file, and
    only that name's older archives are removed."""
    full_id = image_id(image)
    names = run("image", "inspect", "--format", "{{range .RepoTags}}{{.}}\n{{end}}", full_id)
    tags = [t for t in names.stdout.split() if t]
    if not tags:
        raise ImageError(f"{image}: no tag to save it under")
    repository = tags[0].rsplit("/", 1)[-1].split(":", 1)[0]
    name = archive_name or repository
    target = images_dir() / f"{name}-{full_id[:12]}.tar"
    if not target.exists():
        # One layout per repository: a derived image shares its base's layers there.
        layout = images_dir() / "oci" / repository
        manifest = _save_layout(full_id, layout)
        partial = target.with_suffix(".tar.partial")
        partial.unlink(missing_ok=True)
        _write_docker_archive(layout, manifest, tags, partial)
        partial.replace(target)
    for old in images_dir().glob(f"{name}-*.tar"):
        if old != target and re.fullmatch(rf"{re.escape(name)}-[0-9a-f]{{12}}\.tar", old.name):
            old.unlink()
    return target


def _save_layout(full_id: str, layout: Path) -> dict:
    """`podman save` the image into an OCI layout kept between runs; return its manifest.

    Uncompressed, the layout's blobs are named by the digests the image's layers already have,
    so podman copies only the layers the layout does not hold: after a code change, the
    project's few small layers, not the dependencies' (`podman save` of a whole docker-archive
    re-reads and re-hashes every layer, ~15 s for the trainer). Only the image's own blobs are
    kept afterwards.
    """
    save = ("save", "--uncompressed", "--format", "oci-dir", "--output", str(layout), full_id)
    layout.parent.mkdir(parents=True, exist_ok=True)
    try:
        run(*save)
        descriptor, manifest = _layout_manifest(layout, full_id)
    except (ImageError, OSError, ValueError, KeyError):
        shutil.rmtree(layout, ignore_errors=True)  # a broken layout: make it again, whole
        run(*save)
        descriptor, manifest = _layout_manifest(layout, full_id)
    partial = layout / "index.json.partial"
    partial.write_text(json.dumps({"schemaVersion": 2, "manifests": [descriptor]}))
    partial.replace(layout / "index.json")
    keep = {descriptor["digest"], manifest["config"]["digest"]}
    keep |= {layer["digest"] for layer in manifest["layers"]}
    for blob in (layout / "blobs" / "sha256").iterdir():
        if f"sha256:{blob.name}" not in keep:
            blob.unlink()
    return manifest


def _layout_manifest(layout: Path, full_id: str) -> tuple[dict, dict]:
    """(index descriptor, manifest) of the image whose config is `full_id` in an OCI layout."""
    blobs = layout / "blobs" / "sha256"
    index = json.loads((layout / "index.json").read_text())
    for descriptor in index["manifests"]:
        manifest = json.loads((blobs / descriptor["digest"].split(":", 1)[1]).read_text())
        if manifest["config"]["digest"] == f"sha256:{full_id}":
            for blob in [manifest["config"], *manifest["layers"]]:
                path = blobs / blob["digest"].split(":", 1)[1]
                if path.stat().st_size != blob["size"]:
                    raise ImageError(f"{path}: {path.stat().st_size} bytes, want {blob['size']}")
            return descriptor, manifest
    raise ImageError(f"{layout}: no manifest for image {full_id[:12]}")


def _write_docker_archive(layout: Path, manifest: dict, tags: Sequence[str], out: Path) -> None:
    """The docker-archive `podman save` writes (manifest.json, config, one tar per layer), made
    from an OCI layout's blobs: `ctr images import` reads manifest.json and the files it names.

    The blobs are copied in the kernel (copy_file_range): 2 GB in about a second, half the time
    of a copy through Python's buffers.
    """
    blobs = layout / "blobs" / "sha256"
    config = manifest["config"]["digest"].split(":", 1)[1]
    layers = [layer["digest"].split(":", 1)[1] for layer in manifest["layers"]]
    entry = {
        "Config": f"{config}.json",
        "RepoTags": list(tags),
        "Layers": [f"{d}.tar" for d in layers],
    }
    members = [(f"{d}.tar", blobs / d) for d in dict.fromkeys(layers)]
    members.append((f"{config}.json", blobs / config))
    with out.open("wb", buffering=0) as tar:
        written = 0
        for name, path in members:
            with path.open("rb") as blob:
                size = os.fstat(blob.fileno()).st_size
                written += _write_all(tar.fileno(), _tar_header(name, size))
                written += _copy_all(blob.fileno(), tar.fileno(), size)
            written += _write_all(tar.fileno(), bytes(-size % 512))
        data = json.dumps([entry], separators=(",", ":")).encode()
        tail = _tar_header("manifest.json", len(data)) + data + bytes(-len(data) % 512)
        # The end: two zero blocks, then zeros to a whole record, as tar(1) and tarfile write it.
        tail += bytes(2 * 512)
        _write_all(tar.fileno(), tail + bytes(-(written + len(tail)) % tarfile.RECORDSIZE))


def _tar_header(name: str, size: int) -> bytes:
    """A tar header for a regular file, read-only, owned by root, dated 0: as podman writes."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o444, 0
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _write_all(fd: int, data: bytes) -> int:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    return len(data)


def _copy_all(src: int, dst: int, size: int) -> int:
    """Copy `size` bytes from src's position to dst's, in the kernel when it can."""
    left = size
    while left:
        try:
            copied = os.copy_file_range(src, dst, left)
        except OSError:  # another file system, or no copy_file_range: read and write
            copied = _write_all(dst, os.read(src, min(left, 1 << 20)))
        if copied == 0:
            raise ImageError(f"copying a blob: {left} of {size} bytes missing")
        left -= copied
    return size


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tfjob_testbed.images.podman", description=__doc__
    )
    parser.add_argument("command", choices=["build"])
    parser.parse_args(argv)
    return build_command(build_all)


def build_command(build: Callable[[], list[BuiltImage]]) -> int:
    """A build as a command: what is missing, or each image built and how long it took."""
    reason = missing_prerequisites()
    if reason is not None:
        print(f"cannot build images: {reason}", file=sys.stderr)
        return 1
    started = time.monotonic()
    try:
        built = build()
    except ImageError as error:
        print(error, file=sys.stderr)
        return 1
    for image in built:
        size = image.archive.stat().st_size / 1e6
        print(f"{' '.join(image.tags)}  {image.image_id[:12]}  {image.archive} ({size:.0f} MB)")
    print(f"done in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(_main())
