"""The trainer's options: how many steps a call runs."""

from __future__ import annotations

import pytest

from tfjob_trainer import options


@pytest.mark.parametrize(
    ("flag", "one_device", "expected"),
    [([], True, 100), ([], False, 10), (["--steps-per-call", "7"], True, 7),
     (["--steps-per-call", "7"], False, 7)],
)  # fmt: skip
def test_steps_per_call(flag, one_device, expected):
    assert options.parse(flag).per_call(one_device) == expected
