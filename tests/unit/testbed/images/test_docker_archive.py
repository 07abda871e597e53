"""The docker archive assembled from an OCI layout's blobs: what `ctr images import` reads must be
what `podman save` would have written, a tar with manifest.json naming the config and layers."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tfjob_testbed.images.docker_archive import layout_manifest, tar_header, write_docker_archive
from tfjob_testbed.images.podman_store import ImageError


def put_blob(layout: Path, data: bytes) -> str:
    """A blob in the layout, named by its digest; returns the hex digest."""
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return digest


def image(layout: Path, config: bytes, layers: list[bytes]) -> tuple[str, dict[str, Any]]:
    """An image's config, layers and manifest in the layout; returns (config digest, manifest)."""
    config_digest = put_blob(layout, config)
    manifest = {
        "config": {"digest": f"sha256:{config_digest}", "size": len(config)},
        "layers": [{"digest": f"sha256:{put_blob(layout, d)}", "size": len(d)} for d in layers],
    }
    return config_digest, manifest


def index(layout: Path, *manifests: dict[str, Any]) -> list[dict[str, Any]]:
    """index.json listing `manifests`; returns its descriptors."""
    descriptors = [
        {"digest": f"sha256:{put_blob(layout, json.dumps(m).encode())}"} for m in manifests
    ]
    (layout / "index.json").write_text(json.dumps({"manifests": descriptors}))
    return descriptors


@pytest.mark.parametrize(
    ("name", "size"),
    [
        ("abc.tar", 0),
        ("manifest.json", 511),
        (f"{'a' * 64}.tar", 1 << 33),  # above what a classic header's size field holds
        (f"{'b' * 120}.json", 7),  # a name longer than a classic header holds
        ("ünïcode.json", 1),
    ],
)
def test_a_header_is_a_read_only_root_file_dated_zero(name: str, size: int) -> None:
    header = tar_header(name, size)
    assert len(header) % tarfile.BLOCKSIZE == 0
    padded = header + bytes(min(size, 4096) + 2 * tarfile.BLOCKSIZE)
    with tarfile.open(fileobj=io.BytesIO(padded), mode="r:", ignore_zeros=False) as tar:
        info = tar.next()
    assert info is not None
    assert (info.name, info.size, info.mode, info.mtime) == (name, size, 0o444, 0)
    assert (info.uid, info.gid, info.isreg()) == (0, 0, True)


def test_headers_are_posix_with_pax_extensions_as_podman_writes_them() -> None:
    assert tar_header(f"{'a' * 64}.tar", 1)[257:265] == tarfile.POSIX_MAGIC
    long_name = tar_header(f"{'b' * 120}.json", 1)
    assert long_name[156:157] == tarfile.XHDTYPE  # a pax extended header first


@pytest.mark.parametrize(
    ("layers", "tags"),
    [
        ([b"one" * 1000, b"two"], ["repo/image:1"]),
        ([b"same", b"other", b"same"], ["repo/image:1", "repo/image:1-gpu"]),  # a repeated layer
        ([b""], ["repo/image:1"]),  # an empty layer
        ([b"x" * 512, b"y" * 10240], []),  # sizes on block and record bounds
    ],
)
def test_the_archive_is_what_podman_save_writes(
    tmp_path: Path, layers: list[bytes], tags: list[str]
) -> None:
    layout = tmp_path / "layout"
    config_digest, manifest = image(layout, b'{"architecture": "amd64"}', layers)
    out = tmp_path / "image.tar"
    write_docker_archive(layout, manifest, tags, out)

    assert out.stat().st_size % tarfile.RECORDSIZE == 0
    layer_names = [f"{hashlib.sha256(d).hexdigest()}.tar" for d in layers]
    with tarfile.open(out) as tar:
        members = tar.getmembers()
        contents = {}
        for member in members:
            data = tar.extractfile(member)
            assert data is not None
            contents[member.name] = data.read()
    assert [m.name for m in members] == [
        *dict.fromkeys(layer_names),
        f"{config_digest}.json",
        "manifest.json",
    ]
    assert json.loads(contents["manifest.json"]) == [
        {"Config": f"{config_digest}.json", "RepoTags": tags, "Layers": layer_names}
    ]
    assert contents[f"{config_digest}.json"] == b'{"architecture": "amd64"}'
    for name, layer in zip(layer_names, layers, strict=True):
        assert contents[name] == layer


def test_the_manifest_is_the_one_of_the_image_asked_for(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    _, other = image(layout, b"other config", [b"a"])
    wanted_id, wanted = image(layout, b"wanted config", [b"a", b"b"])
    descriptors = index(layout, other, wanted)
    assert layout_manifest(layout, wanted_id) == (descriptors[1], wanted)


def test_a_blob_of_the_wrong_size_is_an_error(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    config_id, manifest = image(layout, b"config", [b"layer"])
    index(layout, manifest)
    (layout / "blobs" / "sha256" / manifest["layers"][0]["digest"][7:]).write_bytes(b"cut")
    with pytest.raises(ImageError, match="3 bytes, want 5"):
        layout_manifest(layout, config_id)


def test_an_image_the_layout_lacks_is_an_error(tmp_path: Path) -> None:
    layout = tmp_path / "layout"
    _, manifest = image(layout, b"config", [b"layer"])
    index(layout, manifest)
    with pytest.raises(ImageError, match="no manifest for image 0123456789ab"):
        layout_manifest(layout, "0123456789ab" * 5)
