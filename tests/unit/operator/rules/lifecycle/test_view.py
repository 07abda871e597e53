"""A job's size is bounded before memory is spent on it: the schema's maximum, then the
TF_CONFIG its tasks' addresses make (`tfconfig.too_large`)."""

from __future__ import annotations

import tracemalloc

import pytest

from tfjob_operator.api.spec import MAX_REPLICAS
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle import JobView
from tfjob_testbed.core.jobs import tfjob

# What reading one job may cost at most, whatever its size (the chart's limit is 256 MiB).
PEAK_BYTES = 8 * 2**20


@pytest.mark.parametrize(
    ("workers", "says"),
    [
        (10**6, f"less than or equal to {MAX_REPLICAS}"),
        (MAX_REPLICAS, "tasks make a TF_CONFIG of about"),
        (2500, "2501 tasks make a TF_CONFIG of about"),
    ],
)
def test_a_job_too_large_is_invalid_before_anything_is_rendered(workers, says):
    body = tfjob("huge", replicas={"PS": 1, "Worker": workers})
    tracemalloc.start()
    try:
        view = JobView.from_body(body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert view.spec is None and view.built is None
    assert any(says in p for p in view.problems), view.problems
    assert peak < PEAK_BYTES


def test_a_job_too_large_fails_with_the_reason_and_makes_no_child(cluster):
    key = cluster.create("huge", replicas={"PS": 1, "Worker": 10**6})
    cluster.reconcile(key)
    status = cluster.status(key)
    assert st.state(status) == "Failed"
    failed = next(c for c in status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == st.Reason.INVALID_SPEC
    assert "spec.tfReplicaSpecs.Worker.replicas" in failed["message"]
    assert cluster.calls("apply") == []
    assert st.Reason.INVALID_SPEC in cluster.reasons()
