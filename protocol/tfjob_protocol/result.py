"""The one machine-readable line a trainer task ends with: `TFJOB_RESULT {json}`.

The trainer writes it with `format_line`; the local runner, `tfjob submit --follow` and the
tests read it back with `parse_last`. Neither side imports the other, so the line's shape lives
here.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any, TypedDict

PREFIX = "TFJOB_RESULT "


class Result(TypedDict, total=False):
    """The fields a reader may use. A task prints those that apply to it: a worker that is not
    the chief has no test accuracy, checkpoint or export (None), only the synchronous and
    between-graph strategies count replicas, only the evaluator counts evaluations."""

    role: str  # "local", or "<type>:<index>" as in TF_CONFIG
    strategy: str  # e.g. "mirrored", "between-graph-sync", "evaluator"
    steps: int  # the global step the task ended at
    trained_steps: int  # global steps this run trained (0 when it resumed at the end)
    local_steps: int  # between-graph: the steps this worker itself ran
    replicas: int
    loss: float
    train_accuracy: float
    test_accuracy: float | None
    examples_per_sec: float | None  # steady state: after the first report
    wall_examples_per_sec: float  # the whole loop, start-up and tracing included
    first_step_sec: float | None  # from the process's start
    checkpoint: str | None
    export: str | None
    evaluations: int  # evaluator: checkpoints evaluated
    metrics: dict[str, float]  # the compiled metrics at the last report (training batches)
    evaluation: dict[str, float]  # loss and compiled metrics over the evaluation input
    peak_rss_mib: int
    cpu_sec: float


def format_line(result: Mapping[str, Any]) -> str:
    """The line as printed: keys sorted, so two runs' lines compare as text."""
    return PREFIX + json.dumps(dict(result), sort_keys=True)


def parse_last(output: str) -> Result | None:
    """The last result line of a task's output, if any (a garbled one is skipped)."""
    for line in reversed(output.splitlines()):
        if line.startswith(PREFIX):
            with contextlib.suppress(ValueError):
                parsed = json.loads(line[len(PREFIX) :])
                if isinstance(parsed, dict):
                    return parsed  # type: ignore[return-value]
    return None
