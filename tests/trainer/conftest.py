"""Trainer tests: real TensorFlow processes talking gRPC on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that starts a job of tasks (`make_job`, or `tfjob run`) is `multiprocess`: make test
    runs those one at a time, so that no two jobs share the two cores and miss their deadlines;
    the one-process tests run beside each other."""
    here = Path(__file__).parent
    for item in items:
        if item.path.parent != here:
            continue
        if "make_job" in getattr(item, "fixturenames", ()) or item.path.name == "test_local_run.py":
            item.add_marker(pytest.mark.multiprocess)
