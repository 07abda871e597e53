"""A task of a cluster pinned to one CPU still gets two inter-op threads (one hangs a PS
worker); a single process keeps TensorFlow's choice."""

from __future__ import annotations

import os

import pytest

from tfjob_trainer.runtime import threads


@pytest.fixture
def cpus():
    """Run the test pinned to the given CPUs, then put the affinity back."""
    before = os.sched_getaffinity(0)
    yield lambda wanted: os.sched_setaffinity(0, wanted)
    os.sched_setaffinity(0, before)


def test_one_cpu_gets_two_inter_op_threads(cpus):
    cpus({min(os.sched_getaffinity(0))})
    assert threads.inter_op_threads() == 2
    assert threads.server_config().inter_op_parallelism_threads == 2


def test_one_process_with_no_peers_keeps_tensorflows_choice_on_one_cpu(cpus):
    cpus({min(os.sched_getaffinity(0))})
    assert threads.inter_op_threads(clustered=False) == 0


def test_more_cpus_leave_tensorflow_its_own_choice(cpus):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    assert threads.inter_op_threads() == 0
    assert threads.server_config().inter_op_parallelism_threads == 0
