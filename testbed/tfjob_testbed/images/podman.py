"""The operator and trainer images, built from the project's Dockerfile by podman, here; and the
bed's other images built the same way: a Go program's, another build of a project image.

The Dockerfile's base is the stand-in `debian_base` makes. Everything is cached: a build is
stamped with a key of what it reads (`build_context`), so a second run with no change does no
work, and a code-only change rebuilds only the layers that copy the code. Each image is saved as
a docker archive (`docker_archive`) for the real node's containerd.

Usage::

    python -m tfjob_testbed.images.podman build      # base (once), both images, both archives
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tfjob_testbed.core.paths import ROOT
from tfjob_testbed.images.build_context import build_key
from tfjob_testbed.images.debian_base import BASE_IMAGE, ensure_base
from tfjob_testbed.images.docker_archive import archive
from tfjob_testbed.images.podman_store import (
    ImageError,
    image_id,
    images_dir,
    locked,
    podman_command,
    quiet_id,
    run,
)

DOCKERFILE = ROOT / "Dockerfile"
CHART = ROOT / "charts" / "tfjob-operator" / "Chart.yaml"
REPOSITORY = "docker.io/tfjob-operator"
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# The hard nofile limit here is 20000, above what runc may set by default; these fit under it.
ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")


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


def build(target: str, tags: Sequence[str]) -> str:
    """`podman build --target TARGET` on the stand-in base, with cached layers; return its ID.

    When nothing the build reads has changed (the files .dockerignore lets through, the
    Dockerfile, the base image) and the tags still name the image built last time, podman is not
    run at all: even a fully cached build re-copies the trainer's venv to check its cache.
    """
    with locked():
        base = ensure_base()
        stamp = images_dir() / f"{target}.stamp"
        key = build_key(target, tags, image_id(base))
        stamped_key, _, stamped_id = (stamp.read_text() if stamp.exists() else "").partition(" ")
        stamped_id = stamped_id.strip()
        if stamped_key == key and all(quiet_id(tag) == stamped_id for tag in tags):
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
    if stamped_key == key and quiet_id(tag) == stamped_id:
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
        base = ensure_base()
        digest = hashlib.sha256(f"program v1\0{tag}\0{image_id(base)}\0".encode())
        digest.update(containerfile.encode())
        digest.update(hashlib.sha256(binary.read_bytes()).digest())

        def run_build() -> None:
            _build_from_files(containerfile, {name: (binary.read_bytes(), 0o755)}, tag, stamp_name)

        built = stamped_build(stamp_name, digest.hexdigest(), tag, run_build)
        return BuiltImage((tag,), built, archive(built))


def _build_from_files(
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
            _build_from_files(containerfile, context, tag, stamp_name)

        built = stamped_build(stamp_name, digest.hexdigest(), tag, run_build)
        # Archived under its own name: the image it derives from keeps its archive.
        return BuiltImage((tag,), built, archive(built, stamp_name))


def build_all() -> list[BuiltImage]:
    """Build the operator and trainer images (cached) and save each to an archive."""
    with locked():
        built = []
        for target, tags in image_tags().items():
            built_id = build(target, tags)
            built.append(BuiltImage(tags, built_id, archive(built_id)))
        return built


def _drop_untagged(old_id: str) -> None:
    """Remove an image the last build replaced, if nothing names it any more.

    Its parents that nothing else builds on go with it (a trainer code change leaves its large
    dependency layer behind otherwise); the layer cache of the current images has children and
    stays.
    """
    names = subprocess.run(
        [*podman_command(), "image", "inspect", "--format", "{{len .RepoTags}}", old_id],
        capture_output=True,
        text=True,
    )
    if names.returncode == 0 and names.stdout.strip() == "0":
        subprocess.run([*podman_command(), "rmi", old_id], capture_output=True)


def _main(argv: Sequence[str] | None = None) -> int:
    """`python -m tfjob_testbed.images.podman build`, as `make images` runs it."""
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
