"""Trainer tests: real TensorFlow processes talking gRPC on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tfjob_testbed.project.launcher import FAST, Job


@pytest.fixture
def make_job(tmp_path) -> Iterator[Callable[..., Job]]:
    jobs: list[Job] = []

    def make(
        replicas: dict[str, int],
        *args: str,
        checkpoints: bool = True,
        unmounted: frozenset[str] = frozenset(),
        cpus: dict[str, str] | None = None,
        memory: dict[str, int] | None = None,
    ) -> Job:
        job = Job(tmp_path, replicas, [*FAST, *args], checkpoints, unmounted, cpus, memory)
        jobs.append(job)
        return job

    yield make
    for job in jobs:
        job.stop_all()
