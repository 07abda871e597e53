"""What `tfjob run` and `tfjob submit --follow` print: `tfjob run` hides TensorFlow's C++
start-up lines, and only those; the closing summary reads the chief's result line: MNIST's test
accuracy, or a user's model's evaluation."""

from __future__ import annotations

import pytest

from tfjob_operator.cli.printing import is_chatter, summary_lines


@pytest.mark.parametrize(
    ("line", "hidden"),
    [
        (
            "WARNING: All log messages before absl::InitializeLog() is called are written",
            True,
        ),
        (
            "I0000 00:00:1795490835.940204   22368 cpu_feature_guard.cc:227] This binary",
            True,
        ),
        ("W0000 00:00:1795490835.940204   22368 grpc_server_lib.cc:1] started", True),
        (
            "2026-11-24 03:00:00.123456: I tensorflow/core/util/port.cc:153] oneDNN custom ops",
            True,
        ),
        (
            "To enable the following instructions: AVX2 FMA, in other operations, rebuild"
            " TensorFlow"
            " with the appropriate compiler flags.",
            True,
        ),
        # Errors always show: a lost peer is news.
        ("E0000 00:00:1795490835.940204   22368 grpc.cc:1] connection to worker-1 lost", False),
        ("2026-11-24 03:00:00.123456: E tensorflow/core/x.cc:1] failed", False),
        # The program's own lines, whatever they look like.
        ("2026-11-24 03:20:43,109 INFO role ps:0, strategy parameter-server", False),
        ("step 100, loss = 0.21 (45312.0 examples/sec)", False),
        ("WARNING: this is the user's own warning", False),
    ],
)
def test_chatter(line, hidden):
    assert is_chatter(line) is hidden


SUCCEEDED = {"conditions": [{"type": "Succeeded", "status": "True", "message": "done"}]}


@pytest.mark.parametrize(
    ("chief", "row"),
    [
        ({"steps": 100, "test_accuracy": 0.97, "export": "e"}, "test accuracy  0.97"),
        (
            {"steps": 100, "test_accuracy": None, "evaluation": {"loss": 0.031, "mae": 0.13}},
            "evaluation  loss 0.031, mae 0.13",
        ),
        ({"steps": 100, "test_accuracy": None}, "test accuracy  None"),
        ({}, "test accuracy  -"),
    ],
    ids=["mnist", "user-model", "no-evaluation", "no-result"],
)
def test_the_summary_shows_what_the_chief_evaluated(chief, row):
    lines = summary_lines(SUCCEEDED, 1.0, [chief or None])
    assert any(line.strip() == row for line in lines), lines
