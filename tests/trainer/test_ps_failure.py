"""Losing a parameter server loses the variables: the coordinator must fail, not hang."""

from __future__ import annotations

import pytest


@pytest.mark.smoke
def test_chief_exits_non_zero_when_a_ps_dies(make_job):
    job = make_job(
        {"chief": 1, "worker": 1, "ps": 1}, "--strategy", "parameter-server", "--steps", "100000"
    )
    job.start_all()
    job.wait_for_line("chief-0", "step 40,")
    job.kill("ps-0")
    chief = job.wait("chief-0", 180)
    assert chief.popen.returncode not in (0, 2), chief.tail()
    assert "failed" in chief.output()
