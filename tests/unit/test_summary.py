"""The closing summary of `tfjob run` and `tfjob submit --follow` reads the chief's result
line: MNIST's test accuracy, or a user's model's evaluation."""

from __future__ import annotations

import pytest

from tfjob_operator.cli.output import summary_lines

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
