"""Trainer tests: real TensorFlow processes talking gRPC on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.trainer.launcher import Job

FAST = [
    "--dataset",
    "digits",
    "--batch-size",
    "32",
    "--log-every",
    "20",
    "--checkpoint-every",
    "20",
    "--peer-timeout",
    "60",
]


@pytest.fixture
def make_job(tmp_path) -> Iterator[Callable[..., Job]]:
    jobs: list[Job] = []

    def make(
        replicas: dict[str, int],
        *args: str,
        checkpoints: bool = True,
        unmounted: frozenset[str] = frozenset(),
        cpus: dict[str, str] | None = None,
    ) -> Job:
        job = Job(tmp_path, replicas, [*FAST, *args], checkpoints, unmounted, cpus)
        jobs.append(job)
        return job

    yield make
    for job in jobs:
        job.stop_all()
