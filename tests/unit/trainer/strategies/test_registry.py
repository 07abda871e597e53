"""The trainer's one registry of runners: every strategy `--strategy` can resolve to, and the
evaluator, behind one signature, imported only when looked up."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import tfjob_trainer
from tfjob_protocol.result import Result
from tfjob_trainer import config
from tfjob_trainer.config import Task
from tfjob_trainer.data.mnist import Files
from tfjob_trainer.options import Options
from tfjob_trainer.strategies import registry

TRAINER = Path(tfjob_trainer.__file__).parent


def test_every_strategy_and_the_evaluator_has_a_runner():
    resolvable = {s for s in config.STRATEGIES if s != "auto"}
    assert set(registry.RUNNERS) == resolvable | {registry.EVALUATOR}


def test_an_unknown_name_says_which_names_there_are():
    with pytest.raises(ValueError, match=r"no runner for strategy 'ring-allreduce': one of ") as e:
        registry.runner("ring-allreduce")
    assert all(name in str(e.value) for name in registry.RUNNERS)


def test_looking_up_nothing_imports_no_tensorflow():
    """A bad configuration fails in a fraction of a second: __main__ and the registry import
    TensorFlow only with a runner."""
    code = (
        "import sys, tfjob_trainer.__main__, tfjob_trainer.strategies.registry as s\n"
        "try:\n    s.runner('nope')\nexcept ValueError:\n    pass\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


@pytest.mark.parametrize("name", sorted(registry.RUNNERS))
def test_every_runner_has_the_one_signature(name):
    run = registry.runner(name)  # imports TensorFlow: no op runs
    params = list(inspect.signature(run).parameters.values())
    assert [p.name for p in params] == ["opts", "files", "task"]
    assert all(p.default is inspect.Parameter.empty for p in params)
    hints = typing.get_type_hints(run)
    assert hints["opts"] is Options
    assert hints["files"] == Files | None and hints["task"] == Task | None
    assert hints["return"] in (Result, Result | None)


def imported_packages(root: Path) -> set[str]:
    """The top-level packages the modules under `root`, subpackages included, import (absolute
    imports only)."""
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found


def test_the_trainer_never_imports_the_operator():
    """The trainer image holds no operator: what both sides read is in tfjob_protocol."""
    packages = imported_packages(TRAINER)
    assert "tfjob_protocol" in packages and "tfjob_operator" not in packages
