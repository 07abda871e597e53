"""The stand-in for the Dockerfile's base image, and the debootstrap every Debian rootfs here
comes from.

No registry is reachable, so the Dockerfile's base (python:3.11-slim) is replaced by Debian
bookworm's own Python 3.11 from debootstrap, imported into podman and made again only when its
recipe changes. The other images on a Debian rootfs (kind's node, Katib's PostgreSQL) use the
same `debootstrap` and `tar_rootfs`.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import tempfile
from pathlib import Path

from tfjob_testbed.images.podman_store import (
    ImageError,
    image_id,
    images_dir,
    locked,
    quiet_id,
    run,
)

BASE_IMAGE = "localhost/tfjob-base:bookworm-py311"
DEBIAN_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")
DEFAULT_MIRROR = "http://deb.debian.org/debian"

# Everything that decides the stand-in base: change any of it and the base is made again.
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
BASE_SUITE = "bookworm"
BASE_CHANGES = (
    "ENV LANG=C.UTF-8",
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    'CMD ["python3"]',
)
BASE_RECIPE = "\n".join(["base v1", BASE_SUITE, "minbase", BASE_PACKAGES, *BASE_CHANGES])


def ensure_base() -> str:
    """Make and import the stand-in base once; return its name for --build-arg BASE_IMAGE."""
    with locked():
        return _ensure_base()


def _recipe_hash() -> str:
    """The base's stamp: the recipe's digest, so that a changed recipe makes the base again."""
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
        current = quiet_id(BASE_IMAGE)
        if current is not None and stamped[1:] == [current]:
            return BASE_IMAGE
    else:
        _debootstrap(rootfs_tar)
    changes = [arg for change in BASE_CHANGES for arg in ("--change", change)]
    run("import", *changes, str(rootfs_tar), BASE_IMAGE)
    stamp.write_text(f"{recipe} {image_id(BASE_IMAGE)}\n")
    return BASE_IMAGE


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
