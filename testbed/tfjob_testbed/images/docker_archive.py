"""Images saved as docker archives, the files `ctr images import` takes on the real node.

An archive is written here from an OCI layout podman keeps up to date, not by `podman save` of a
whole docker-archive: the layout holds the layers it saved last time, so after a code change
podman copies only the project's few small layers. The archive itself is what `podman save`
would write (manifest.json, the config, one tar per layer), assembled from the layout's blobs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfjob_testbed.images.podman_store import ImageError, image_id, images_dir, locked, run

# An OCI JSON document (index descriptor, manifest) as json.loads gives it.
Document = dict[str, Any]


def archive(image: str, archive_name: str | None = None) -> Path:
    """Save an image, with all its tags, to a docker-archive for `ctr images import`.

    The file is images_dir()/<name>-<12 hex of the image ID>.tar, reused while the image ID is
    unchanged; `name` is `archive_name`, by default the first tag's repository, and only that
    name's older archives are removed. It is written from an OCI layout under images_dir()/oci
    that podman updates with the layers it lacks (_save_layout).
    """
    with locked():
        return _archive(image, archive_name)


def _archive(image: str, archive_name: str | None = None) -> Path:
    """`archive`, under the lock its caller holds."""
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
        write_docker_archive(layout, manifest, tags, partial)
        partial.replace(target)
    for old in images_dir().glob(f"{name}-*.tar"):
        if old != target and re.fullmatch(rf"{re.escape(name)}-[0-9a-f]{{12}}\.tar", old.name):
            old.unlink()
    return target


def _save_layout(full_id: str, layout: Path) -> Document:
    """`podman save` the image into an OCI layout kept between runs; return its manifest.

    Uncompressed, the layout's blobs are named by the digests the image's layers already have,
    so podman copies only the layers the layout does not hold: after a code change, the
    project's few small layers, not the dependencies' (`podman save` of a whole docker-archive
    re-reads and re-hashes every layer). Only the image's own blobs are kept afterwards.
    """
    save = ("save", "--uncompressed", "--format", "oci-dir", "--output", str(layout), full_id)
    layout.parent.mkdir(parents=True, exist_ok=True)
    try:
        run(*save)
        descriptor, manifest = layout_manifest(layout, full_id)
    except (ImageError, OSError, ValueError, KeyError):
        shutil.rmtree(layout, ignore_errors=True)  # a broken layout: make it again, whole
        run(*save)
        descriptor, manifest = layout_manifest(layout, full_id)
    partial = layout / "index.json.partial"
    partial.write_text(json.dumps({"schemaVersion": 2, "manifests": [descriptor]}))
    partial.replace(layout / "index.json")
    keep = {descriptor["digest"], manifest["config"]["digest"]}
    keep |= {layer["digest"] for layer in manifest["layers"]}
    for blob in (layout / "blobs" / "sha256").iterdir():
        if f"sha256:{blob.name}" not in keep:
            blob.unlink()
    return manifest


def layout_manifest(layout: Path, full_id: str) -> tuple[Document, Document]:
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


def write_docker_archive(layout: Path, manifest: Document, tags: Sequence[str], out: Path) -> None:
    """The docker-archive `podman save` writes (manifest.json, config, one tar per layer), made
    from an OCI layout's blobs: `ctr images import` reads manifest.json and the files it names.

    The blobs are copied in the kernel (copy_file_range), faster than through Python's buffers.
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
                written += _write_all(tar.fileno(), tar_header(name, size))
                written += _copy_all(blob.fileno(), tar.fileno(), size)
            written += _write_all(tar.fileno(), bytes(-size % 512))
        data = json.dumps([entry], separators=(",", ":")).encode()
        tail = tar_header("manifest.json", len(data)) + data + bytes(-len(data) % 512)
        # The end: two zero blocks, then zeros to a whole record, as tar(1) and tarfile write it.
        tail += bytes(2 * 512)
        _write_all(tar.fileno(), tail + bytes(-(written + len(tail)) % tarfile.RECORDSIZE))


def tar_header(name: str, size: int) -> bytes:
    """A tar header for a regular file, read-only, owned by root, dated 0: as podman writes."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o444, 0
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _write_all(fd: int, data: bytes) -> int:
    """Write all of `data`: os.write may write less than it is given."""
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
