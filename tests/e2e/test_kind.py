"""The kind end-to-end run (tests/e2e/kind.sh) as pytest tests, so CI reports why one skipped.

Both make a kind cluster, install the chart and run tests from tests/node on it (the same
tests, not copies), then delete the cluster: kind.sh fails if anything of it is left. The smoke
runs one example to Succeeded (`make test`); the whole run takes every node test that fits kind
(`make test-all`, `make e2e`).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("kind.sh")
SMOKE = "tests/node/test_cluster.py::test_example_trains_to_succeeded_on_the_volume[mnist-ps]"


def _skip_line(output: str) -> str | None:
    return next((ln for ln in output.splitlines() if ln.startswith("SKIP:")), None)


def run_kind(tests: str, timeout: float) -> str:
    """kind.sh with KIND_TESTS=`tests`: its output, once it has passed (or a skip)."""
    check = subprocess.run(
        ["bash", str(SCRIPT), "--check"], capture_output=True, text=True, timeout=120
    )
    skip = _skip_line(check.stdout)
    if skip:
        pytest.skip(skip)
    assert check.returncode == 0, check.stdout + check.stderr
    run = subprocess.run(
        ["bash", str(SCRIPT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        env=dict(os.environ, KIND_TESTS=tests, KEEP_CLUSTER="0"),
    )
    tail = "\n".join(run.stdout.splitlines()[-150:])
    assert run.returncode == 0, f"kind.sh exited {run.returncode}:\n{tail}"
    assert "PASS: kind e2e" in run.stdout, tail
    return run.stdout


@pytest.mark.smoke
def test_kind_cluster_runs_an_example_to_succeeded_and_leaves_nothing() -> None:
    out = run_kind(SMOKE, timeout=1800)
    assert "1 passed" in out, out[-3000:]


WHOLE_RUN_SECONDS = 4 * 3600


# Its own limit, not the suite's per-test one (pyproject.toml): every node test on kind takes
# far longer.
@pytest.mark.timeout(WHOLE_RUN_SECONDS + 300)
def test_kind_runs_every_node_test_that_fits_it() -> None:
    out = run_kind("tests/node", timeout=WHOLE_RUN_SECONDS)
    assert " passed" in out and " failed" not in out, out[-3000:]
