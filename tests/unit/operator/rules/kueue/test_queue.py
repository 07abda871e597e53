"""A job's place in Kueue: which jobs wait in a LocalQueue, and which one."""

from __future__ import annotations

import pytest

from tfjob_operator.rules import kueue
from tfjob_operator.rules.kueue.queue import DEFAULT_QUEUE, Queueing, queue_name


@pytest.mark.parametrize(
    ("labels", "manage_all", "queue"),
    [
        ({kueue.QUEUE_LABEL: "team-a"}, False, "team-a"),
        ({}, False, None),
        ({}, True, DEFAULT_QUEUE),
        ({kueue.QUEUE_LABEL: "team-a"}, True, "team-a"),
    ],
)
def test_which_jobs_wait_in_a_queue(labels, manage_all, queue):
    assert queue_name(labels, Queueing(manage_all)) == queue
    assert queue_name(labels, None) is None, "without --kueue, no job is queued"
