"""The termination message of a stop on request, as the trainer writes it and the operator
reads it back."""

from __future__ import annotations

import pytest

from tfjob_protocol.stop import message, saved_step


@pytest.mark.parametrize("step", [0, 1234, None])
def test_the_step_written_is_the_step_read(step):
    assert saved_step(message(step)) == step


@pytest.mark.parametrize(
    "text",
    [
        "",
        None,
        "Error: out of memory",
        "[1, 2]",
        '{"tfjobStopped": 3}',
        '{"tfjobStopped": {"step": true}}',
        '{"tfjobStopped": {"step": "12"}}',
    ],
)
def test_other_messages_name_no_step(text):
    assert saved_step(text) is None
