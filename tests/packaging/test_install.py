"""`pip install tfjob-operator` as a user runs it: a fresh virtualenv, no extras, no test bed.

The commands must work from what the base dependencies bring, and `tfjob run` must say in one
line what is missing for training instead of a traceback in every task.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tfjob_testbed.core.paths import ROOT

SOURCES = ("pyproject.toml", "README.md", "operator", "trainer", "protocol")
# One worker runs the module (make test spreads the unit pass over both cores with
# --dist loadgroup): its virtualenv is made once, not once per worker.
pytestmark = pytest.mark.xdist_group("packaging")


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv with `pip install .` of a copy of the sources (pip builds in the tree it is
    given, so the checkout stays clean)."""
    base = tmp_path_factory.mktemp("install")
    src = base / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(
                path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
            )
        else:
            shutil.copy(path, src / name)
    env = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
    subprocess.run(
        [str(env / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(src)],
        check=True,
        timeout=600,
    )
    return env


def run(venv: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(venv / "bin" / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_both_commands_work_without_extras(venv: Path) -> None:
    tfjob = run(venv, "tfjob", "--help")
    assert tfjob.returncode == 0, tfjob.stderr
    assert "submit" in tfjob.stdout and "run" in tfjob.stdout
    operator = run(venv, "tfjob-operator", "--help")
    assert operator.returncode == 0, operator.stderr
    assert "--kube-api-qps" in operator.stdout


def test_only_the_trainer_extra_brings_tensorflow(venv: Path) -> None:
    installed = run(venv, "python", "-c", "import tensorflow")
    assert installed.returncode != 0
    testbed = run(venv, "python", "-c", "import tfjob_testbed")
    assert testbed.returncode != 0, "the test bed is not for users"


def test_run_without_tensorflow_names_the_extra(venv: Path, tmp_path: Path) -> None:
    job = run(
        venv,
        "tfjob",
        "run",
        str(ROOT / "manifests/examples/mnist-ps.yaml"),
        "--workdir",
        str(tmp_path / "run"),
        cwd=tmp_path,
    )
    assert job.returncode == 2
    last = job.stdout.strip().splitlines()[-1]
    assert last == (
        "tfjob: the trainer needs TensorFlow, which this Python lacks: "
        "pip install 'tfjob-operator[trainer]'"
    )
    assert "Traceback" not in job.stdout + job.stderr


def test_the_trainer_without_tensorflow_says_so_in_one_line(venv: Path, tmp_path: Path) -> None:
    trainer = run(venv, "tfjob-trainer", "--steps=1", cwd=tmp_path)
    assert trainer.returncode == 2
    assert trainer.stderr.strip() == (
        "tfjob-trainer: TensorFlow is not installed: pip install 'tfjob-operator[trainer]'"
    )
