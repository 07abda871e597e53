"""Which code runs a task: every strategy, and the evaluator, by name, behind one signature.

A runner is imported only when it is looked up, and importing it imports TensorFlow, the bulk
of a task's start-up: `__main__` looks it up once it knows the task's part (after a bad
configuration has failed fast) and times the import. This module imports no TensorFlow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tfjob_protocol.result import Result

    from .config import Task
    from .data import Files
    from .options import Options

EVALUATOR = "evaluator"


class Runner(Protocol):
    """Do this task's part. `files` is None for a parameter server (it reads no data), `task`
    for a single local process (no TF_CONFIG). The result is None for a task that only serves;
    tasks that serve run until they are stopped."""

    def __call__(
        self, opts: Options, files: Files | None, task: Task | None, /
    ) -> Result | None: ...


# Name -> (module of this package, function). Every function has the Runner's signature.
RUNNERS: dict[str, tuple[str, str]] = {
    "parameter-server": ("ps", "run"),
    "mirrored": ("sync", "mirrored"),
    "multi-worker-mirrored": ("sync", "multi_worker"),
    "between-graph": ("between_graph", "run"),
    EVALUATOR: ("evaluator", "run"),
}


def runner(name: str) -> Runner:
    """The runner of strategy `name` (as `config.resolve_strategy` returns it) or of the
    evaluator; importing its module imports TensorFlow."""
    try:
        module, function = RUNNERS[name]
    except KeyError:
        raise ValueError(
            f"no runner for strategy {name!r}: one of {', '.join(sorted(RUNNERS))}"
        ) from None
    return getattr(importlib.import_module(f".{module}", __package__), function)
