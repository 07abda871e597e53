"""What `tfjob run` and `tfjob submit --follow` print alike: each replica's lines under its
prefix, TensorFlow's C++ start-up chatter hidden, and the closing summary."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tfjob_operator.rules import status as st
from tfjob_protocol.result import Result

# TensorFlow's C++ start-up chatter at INFO and WARNING level (oneDNN, CPU features, absl's
# preamble, gRPC servers starting), which buries the training lines: hidden unless --verbose.
# Errors (E, F) always show.
CPP_CHATTER = re.compile(
    r"^(?:[IW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ \S+:\d+\]"  # absl: I0000 00:00:17.1  12 x.cc:3]
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IW] \S+:\d+\]"  # 2026-01-01 00:00:00.1: I x.cc:3]
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|To enable the following instructions: .* rebuild TensorFlow)"
)


def is_chatter(line: str) -> bool:
    """A line of TensorFlow's C++ start-up logging, not of the program itself."""
    return CPP_CHATTER.match(line) is not None


COLOURS = ["36", "33", "35", "32", "34", "31"]


def line_prefix(name: str, index: int, colour: bool) -> str:
    """`[worker-1] `, coloured per replica on a terminal."""
    if not colour:
        return f"[{name}] "
    return f"\033[{COLOURS[index % len(COLOURS)]}m[{name}]\033[0m "


def summary_lines(
    status: st.Status,
    duration: float,
    results: list[Result | None],
    *,
    checkpoints: object = "-",
    tensorboard: str = "-",
    stopped: tuple[str, int | None] | None = None,
) -> list[str]:
    """The closing summary of a job, the same for `tfjob run` and `tfjob submit --follow`:
    its state and message, and what the chief's result line says. `stopped`: the job was
    stopped on request before it finished (`tfjob run` on Ctrl-C), with what to say of it and
    the step saved; a stopped chief prints no result line."""
    state = st.state(status)
    final: dict[str, Any] = next(
        (c for c in reversed(status.get("conditions", [])) if c["type"] == state), {}
    )
    chief = (
        next((r for r in results if r and r.get("export")), None)
        or next((r for r in results if r), None)
        or {}
    )
    steps = chief.get("steps", "-")
    if stopped is not None:
        state, final = "Stopped", {"message": stopped[0]}
        steps = steps if stopped[1] is None else stopped[1]
    rows = [
        ("state", f"{state}: {final.get('message', '')}"),
        ("duration", f"{duration:.1f} s"),
        ("steps", steps),
        evaluated(chief),
        ("checkpoint", chief.get("checkpoint") or checkpoints),
        ("export", chief.get("export", "-")),
        ("tensorboard", tensorboard),
    ]
    return [f"{key:>14}  {value}" for key, value in rows]


def evaluated(chief: Mapping[str, Any]) -> tuple[str, Any]:
    """MNIST's test accuracy, or a user's model's loss and metrics on its evaluation input."""
    evaluation = chief.get("evaluation")
    if chief.get("test_accuracy") is None and evaluation:
        return ("evaluation", ", ".join(f"{k} {v:.4g}" for k, v in evaluation.items()))
    return ("test accuracy", chief.get("test_accuracy", "-"))
