"""Which code runs a task: every strategy, and the evaluator, by name, behind one signature.

The names are `config`'s (the one list, which `--strategy` offers); this registry binds each to
the function that imports its runner. A runner is imported only when it is looked up, and
importing it imports TensorFlow, the bulk of a task's start-up: `__main__` looks it up once it
knows the task's part (after a bad configuration has failed fast), with scikit-learn hidden,
and times the import. The imports are plain local ones, so import-linter sees them; this module
itself imports no TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..config import BETWEEN_GRAPH, MIRRORED, MULTI_WORKER_MIRRORED, PARAMETER_SERVER

if TYPE_CHECKING:
    from tfjob_protocol.result import Result

    from ..config import Task
    from ..data.mnist import Files
    from ..options import Options

EVALUATOR = "evaluator"


class Runner(Protocol):
    """Do this task's part. `files` is None for a parameter server (it reads no data), `task`
    for a single local process (no TF_CONFIG). The result is None for a task that only serves;
    tasks that serve run until they are stopped."""

    def __call__(
        self, opts: Options, files: Files | None, task: Task | None, /
    ) -> Result | None: ...


def _parameter_server() -> Runner:
    from .ps import run

    return run


def _mirrored() -> Runner:
    from .sync import mirrored

    return mirrored


def _multi_worker_mirrored() -> Runner:
    from .sync import multi_worker

    return multi_worker


def _between_graph() -> Runner:
    from .between_graph import run

    return run


def _evaluator() -> Runner:
    from .evaluator import run

    return run


# Name -> the function that imports its runner (and with it TensorFlow).
RUNNERS: dict[str, Callable[[], Runner]] = {
    PARAMETER_SERVER: _parameter_server,
    MIRRORED: _mirrored,
    MULTI_WORKER_MIRRORED: _multi_worker_mirrored,
    BETWEEN_GRAPH: _between_graph,
    EVALUATOR: _evaluator,
}


def runner(name: str) -> Runner:
    """The runner of strategy `name` (as `config.resolve_strategy` returns it) or of the
    evaluator; importing its module imports TensorFlow."""
    try:
        load = RUNNERS[name]
    except KeyError:
        raise ValueError(
            f"no runner for strategy {name!r}: one of {', '.join(sorted(RUNNERS))}"
        ) from None
    return load()
