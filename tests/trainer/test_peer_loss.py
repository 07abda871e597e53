"""A lost MultiWorkerMirrored peer fails the other workers, with one line saying so: they must
not wait in an all-reduce forever, so that the job restarts (or fails) as its policy says."""

from __future__ import annotations

import re
import signal
import time

import pytest

from tfjob_trainer.runtime.exit_codes import EXIT_PEER_LOST

LOST = re.compile(
    r"ERROR worker:\d lost a peer \(.+\): synchronous training needs every worker, "
    r"so this one stops too$",
    re.M,
)


@pytest.mark.parametrize(
    ("workers", "victim", "sig"),
    [
        # Killed: its connections reset, and its neighbours in the ring see it at once.
        pytest.param(3, "worker-1", signal.SIGKILL, marks=pytest.mark.smoke),
        # Hung, as behind a network partition: no reset, only the missing heartbeats tell.
        # Worker 0 leads the coordination service, the harder one to lose.
        (2, "worker-0", signal.SIGSTOP),
    ],
    ids=["killed", "hung-leader"],
)
def test_every_other_worker_exits_non_zero(make_job, workers, victim, sig):
    job = make_job({"worker": workers}, "--strategy", "multi-worker-mirrored", "--steps", "100000")
    job.start_all()
    job.wait_for_line("worker-0", "step 40,")
    job.kill(victim, sig)
    deadline = time.monotonic() + 120
    for name in [n for n in job.procs if n != victim]:
        proc = job.wait(name, max(1.0, deadline - time.monotonic()))
        assert proc.popen.returncode == EXIT_PEER_LOST, proc.tail()  # retried under ExitCode
        assert len(LOST.findall(proc.output())) == 1, proc.tail()
        assert "Traceback" not in proc.output(), "one line, not a traceback"
