"""The example user project's image (examples/tabular/Dockerfile), built with podman FROM the
trainer image built here, as a user builds theirs FROM the released one.

It shares the project images' podman storage and lock (`podman_store`) and archive format
(`docker_archive`), so the real node imports it like the project's own images. Cached: with the
example's files and the trainer image unchanged, the image is neither rebuilt nor saved again.

Usage::

    python -m tfjob_testbed.images.example      # the trainer image too, if it is not built
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from tfjob_testbed.core.paths import ROOT
from tfjob_testbed.images import docker_archive, podman, podman_store

EXAMPLE = ROOT / "examples" / "tabular"
NAME = "tabular-example"


def tag() -> str:
    """The tag examples/tabular/tfjob.yaml names, as containerd spells it."""
    return f"{podman.REPOSITORY}/{NAME}:{podman.app_version()}"


def context_files() -> list[Path]:
    """What the build reads: the Dockerfile, its .dockerignore and the package (the data is
    generated in the image, and .dockerignore keeps anything else out)."""
    package = [
        p
        for p in (EXAMPLE / "tabular_example").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    ]
    return [EXAMPLE / "Dockerfile", EXAMPLE / ".dockerignore", *sorted(package)]


def build_key(trainer_id: str) -> str:
    """Same key, same image: the example's files, the tag and the trainer image it is FROM."""
    digest = hashlib.sha256(f"example v1\0{tag()}\0{trainer_id}\0".encode())
    for path in context_files():
        digest.update(f"{path.relative_to(EXAMPLE).as_posix()}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def build() -> podman.BuiltImage:
    """Build the example image on the trainer image (building that first if needed), cached,
    and save it to an archive for `ctr images import`."""
    trainer_tags = podman.image_tags()["trainer"]
    with podman_store.locked():
        trainer_id = podman.build("trainer", trainer_tags)
        built = podman.stamped_build(
            NAME,
            build_key(trainer_id),
            tag(),
            lambda: podman_store.run(
                "build",
                "--file", str(EXAMPLE / "Dockerfile"),
                # The tag, not the ID: podman resolves it in its own storage, --pull=never.
                "--build-arg", f"TRAINER_IMAGE={trainer_tags[0]}",
                "--layers",
                "--pull=never",
                "--network=none",  # the example needs nothing from outside
                *podman.ULIMITS,
                "--tag", tag(),
                str(EXAMPLE),
                log=podman_store.images_dir() / "logs" / f"build-{NAME}.log",
            ),
        )  # fmt: skip
        return podman.BuiltImage((tag(),), built, docker_archive.archive(built))


def _main() -> int:
    return podman.build_command(lambda: [build()])


if __name__ == "__main__":
    sys.exit(_main())
