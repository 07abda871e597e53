"""A stop on request (SIGTERM to every task at once, as a preemption, a suspend or a resize
sends it) at a random moment of a long checkpoint interval: every strategy saves at the step it
is on, every task exits as stopped (no failure), and a restart resumes at that step."""

from __future__ import annotations

import random
import re
import signal
import socket
import time
from pathlib import Path

import pytest

from tfjob_protocol.stop import EXIT_STOPPED, saved_step
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.project.launcher import Job
from tfjob_trainer.runtime.exit_codes import EXIT_PEER_LOST

USERPKG = Path(__file__).parent / "userpkg"
TARGET = 1500
# No checkpoint boundary before the target but the last: only the stop's save can keep steps.
LONG_INTERVAL = ["--checkpoint-every", "100000", "--log-every", "20"]
STEP = re.compile(r"^step (\d+),", re.M)
RESTORED = re.compile(r"restored \S+ at step (\d+)|starting at global step (\d+)")
USER = ["--model=toyproject.models:regression", "--input=toyproject.data:train"]

CASES = {
    "parameter-server": ({"chief": 1, "ps": 1, "worker": 2}, ["--strategy=parameter-server"]),
    "multi-worker-mirrored": ({"worker": 2}, ["--strategy=multi-worker-mirrored"]),
    "mirrored": ({"worker": 1}, ["--strategy=mirrored", "--cpu-devices=2"]),
    "between-graph": ({"chief": 1, "ps": 1, "worker": 1}, ["--strategy=between-graph"]),
    "users-model-ps": (
        {"chief": 1, "ps": 1, "worker": 1},
        ["--strategy=parameter-server", *USER],
    ),
}


def chief_of(replicas: dict[str, int]) -> str:
    return "chief-0" if "chief" in replicas else "worker-0"


def wait_for_step(job: Job, name: str, step: int, timeout: float = 300) -> int:
    """Until task `name` logs a step at or past `step`; the step it logged."""
    proc = job.procs[name]
    deadline = time.monotonic() + timeout
    while True:
        steps = [int(s) for s in STEP.findall(proc.output())]
        if steps and steps[-1] >= step:
            return steps[-1]
        assert proc.popen.poll() is None, f"{name} exited:\n{proc.tail()}"
        assert time.monotonic() < deadline, f"{name} not at step {step} in {timeout}s"
        time.sleep(0.05)


@pytest.mark.parametrize("case", list(CASES))
def test_sigterm_at_a_random_step_saves_it_and_a_restart_resumes_there(make_job, monkeypatch, case):
    replicas, args = CASES[case]
    monkeypatch.setenv("PYTHONPATH", str(USERPKG))
    job = make_job(replicas, *args, *LONG_INTERVAL, "--steps", str(TARGET))
    job.start_all()
    chief = chief_of(replicas)
    reached = wait_for_step(job, chief, random.randint(60, 600))
    for name in job.procs:
        job.kill(name, signal.SIGTERM, group=False)  # the task's supervisor, as the kubelet does
    deadline = time.monotonic() + 60
    for name in job.procs:
        proc = job.wait(name, max(1.0, deadline - time.monotonic()))
        assert proc.popen.returncode == EXIT_STOPPED, f"{name}:\n{proc.tail()}"
        assert "Traceback" not in proc.output(), proc.tail()
    saved = saved_step(job.termination_log(chief).read_text())
    assert saved is not None and reached <= saved < TARGET, (reached, saved)
    assert f"stopped at step {saved}, saved" in job.procs[chief].output()

    job.start_all()
    result = job.wait(chief, 300).result()
    restored = RESTORED.search(job.procs[chief].output())
    assert restored is not None and saved == int(restored.group(1) or restored.group(2))
    if case == "between-graph":
        # Asynchronous updates may land past the target while the chief stops.
        assert result["steps"] >= TARGET
    else:
        assert result["steps"] == TARGET
        assert result["trained_steps"] == TARGET - saved


def test_a_server_whose_chief_does_not_save_leaves_as_its_grace_period_ends(make_job, monkeypatch):
    """The bound: a parameter server asked to stop while its chief trains on (its node drained
    alone) serves until its grace period nearly ends, then leaves; the chief, without it, fails
    as for a lost peer (a restart resumes from the newest checkpoint)."""
    monkeypatch.setenv("TFJOB_GRACE_PERIOD_SECONDS", "6")
    job = make_job(
        {"chief": 1, "ps": 1, "worker": 1},
        "--strategy=parameter-server",
        "--checkpoint-every=100",
        "--steps=100000",
    )
    job.start_all()
    wait_for_step(job, "chief-0", 120)
    signalled = time.monotonic()
    job.kill("ps-0", signal.SIGTERM)
    assert job.wait("ps-0", 30).popen.returncode == EXIT_STOPPED
    waited = time.monotonic() - signalled
    assert waited >= 6 - 3, waited  # it served on, until the grace period's margin
    assert job.wait("chief-0", 120).popen.returncode == EXIT_PEER_LOST
    assert saved_step(job.termination_log("ps-0").read_text()) is None


def test_a_worker_stopped_alone_leaves_and_the_chief_trains_on(make_job):
    """A parameter-server worker asked to stop while its chief trains on (its node drained)
    serves a short while, for a chief that might be stopping too, then leaves; the chief runs
    its closures on the other worker."""
    job = make_job(
        {"chief": 1, "ps": 1, "worker": 2}, "--strategy=parameter-server", "--steps=100000"
    )
    job.start_all()
    wait_for_step(job, "chief-0", 100)
    job.kill("worker-1", signal.SIGTERM)
    assert job.wait("worker-1", 60).popen.returncode == EXIT_STOPPED
    assert job.procs["chief-0"].popen.poll() is None, job.procs["chief-0"].tail()
    reached = wait_for_step(job, "chief-0", 0)
    wait_for_step(job, "chief-0", reached + 100)  # on the other worker alone


def test_a_task_held_in_its_strategys_setup_leaves_within_seconds(make_job):
    """SIGTERM to a task held inside TensorFlow, where no Python runs: a multi-worker-mirrored
    worker whose peer answers TCP but never speaks (a peer going away). Its supervisor kills it
    and it leaves as stopped, with nothing saved, instead of at the grace period's end."""
    job = make_job({"worker": 2}, "--strategy=multi-worker-mirrored", "--steps=100")
    host, port = job.cluster["worker"][1].rsplit(":", 1)
    with socket.create_server((host, int(port))):
        job.start("worker", 0)
        job.wait_for_line("worker-0", "start-up:", 120)
        # Inside the setup once its own gRPC server serves; and held there.
        own = job.cluster["worker"][0].rsplit(":", 1)
        wait_for(lambda: _accepts(own[0], int(own[1])), 60, "worker-0's server up")
        assert job.procs["worker-0"].popen.poll() is None, job.procs["worker-0"].tail()
        signalled = time.monotonic()
        job.kill("worker-0", signal.SIGTERM, group=False)
        proc = job.wait("worker-0", 30)
    left = time.monotonic() - signalled
    assert proc.popen.returncode == EXIT_STOPPED, proc.tail()
    assert left < 5, left
    assert "did not leave within" in proc.output(), proc.tail()
    assert saved_step(job.termination_log("worker-0").read_text()) is None
    assert "Traceback" not in proc.output(), proc.tail()


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False
