"""The images podman builds here: one Go program's, laid out as its project's own image is
(Kueue's at /, Katib's in /app or /opt/katib)."""

from __future__ import annotations

import pytest

from tfjob_testbed.images.podman import program_containerfile


@pytest.mark.parametrize(
    ("workdir", "user", "lines"),
    [
        ("/", "65532:65532", ["WORKDIR /", "COPY manager /manager", "USER 65532:65532",
                              'ENTRYPOINT ["/manager"]']),
        ("/app", "0:0", ["WORKDIR /app", "COPY manager /app/manager", "USER 0:0",
                         'ENTRYPOINT ["/app/manager"]']),
        ("/opt/katib/", "0:0", ["WORKDIR /opt/katib/", "COPY manager /opt/katib/manager",
                                "USER 0:0", 'ENTRYPOINT ["/opt/katib/manager"]']),
    ],
)  # fmt: skip
def test_the_program_runs_from_its_workdir(workdir: str, user: str, lines: list[str]) -> None:
    text = program_containerfile("base", "manager", workdir, user)
    assert text.splitlines() == ["FROM base", *lines]
