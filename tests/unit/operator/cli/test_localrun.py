"""`tfjob run`'s own rules, no process started: each task's env as the operator gives its pod
(the grace period by the cluster's rule, a termination message file), a process's end read as
a container's, and what a stop on request (Ctrl-C) comes to: the step saved, the summary's
words and the exit code."""

from __future__ import annotations

import signal

import pytest

from tfjob_operator.cli.localrun import (
    LocalRunner,
    exit_code,
    exit_of,
    saved_step,
    stop_message,
    unclean_exit,
)
from tfjob_operator.cli.printing import summary_lines
from tfjob_operator.rules.pods import MESSAGE_LIMIT, Exit
from tfjob_protocol.stop import ENV_GRACE_PERIOD, ENV_TERMINATION_LOG, EXIT_STOPPED, message
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.signals import handled_again_everywhere

SUCCEEDED = {"conditions": [{"type": "Succeeded", "status": "True", "message": "done"}]}
FAILED = {"conditions": [{"type": "Failed", "status": "True", "message": "lost"}]}
RUNNING = {"conditions": [{"type": "Running", "status": "True", "message": "up"}]}


def planned(tmp_path, run_policy=None, chief_grace=None) -> dict[str, tuple[int, dict]]:
    body = tfjob(name="local", replicas={"Chief": 1, "Worker": 2}, run_policy=run_policy)
    if chief_grace is not None:
        body["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"][
            "terminationGracePeriodSeconds"
        ] = chief_grace
    runner = LocalRunner(body, tmp_path)
    runner.plan()
    return {t.name: (t.grace, t.env) for t in runner.tasks}


@pytest.mark.parametrize(
    ("run_policy", "chief_grace", "chief", "worker"),
    [
        (None, None, 30, 30),  # Kubernetes' default
        ({"terminationGracePeriodSeconds": 90}, None, 90, 90),
        ({"terminationGracePeriodSeconds": 90}, 5, 5, 90),  # a template's own wins
        (None, 0, 0, 30),
    ],
)
def test_every_task_gets_its_pods_grace_period(tmp_path, run_policy, chief_grace, chief, worker):
    tasks = planned(tmp_path, run_policy, chief_grace)
    assert {name: grace for name, (grace, _) in tasks.items()} == {
        "chief-0": chief,
        "worker-0": worker,
        "worker-1": worker,
    }
    assert {name: env[ENV_GRACE_PERIOD] for name, (_, env) in tasks.items()} == {
        "chief-0": str(chief),
        "worker-0": str(worker),
        "worker-1": str(worker),
    }


def test_every_task_has_a_termination_message_file_of_its_own(tmp_path):
    files = {name: env[ENV_TERMINATION_LOG] for name, (_, env) in planned(tmp_path).items()}
    assert len(set(files.values())) == 3
    assert all(path.startswith(str(tmp_path)) for path in files.values())


@pytest.mark.parametrize(
    ("returncode", "code", "reason"),
    [(0, 0, "Completed"), (1, 1, "Error"), (201, 201, "Error"), (-9, 137, "Error")],
)
def test_a_process_ends_as_a_container_does(returncode, code, reason):
    assert exit_of(returncode) == Exit(code, reason, "")


def test_the_termination_message_is_cut_as_a_pods_is():
    assert exit_of(201, "x" * 1000).message == "x" * MESSAGE_LIMIT


def test_a_stop_saved_the_newest_step_a_stopped_task_names():
    exits = [
        exit_of(EXIT_STOPPED, message(None)),  # a parameter server: saves nothing
        exit_of(EXIT_STOPPED, message(140)),  # the chief
        exit_of(137, message(999)),  # killed: its message is no stop's
        None,
    ]
    assert saved_step(exits) == 140
    assert saved_step([exit_of(EXIT_STOPPED, message(None)), exit_of(-9)]) is None


@pytest.mark.parametrize(
    ("ended", "killed", "said"),
    [
        (Exit(EXIT_STOPPED), "", ""),
        (Exit(0, "Completed"), "", ""),
        (Exit(1, "Error"), "", "worker-1 (exit code 1)"),
        (
            Exit(137, "Error"),
            "killed after its grace period of 30 s",
            "worker-1 (killed after its grace period of 30 s)",
        ),
    ],
)
def test_a_task_that_did_not_leave_as_stopped_is_named(ended, killed, said):
    assert unclean_exit("worker-1", ended, killed) == said


def test_the_stop_message_names_the_step_saved_and_what_went_wrong():
    assert stop_message("local/job", 140) == (
        "TFJob local/job stopped at step 140, saved; run it again with this --workdir to "
        "resume from step 140."
    )
    said = stop_message("local/job", None, ["chief-0 (killed on a second SIGINT)"])
    assert said.startswith("TFJob local/job stopped with nothing saved;")
    assert said.endswith("Not stopped cleanly: chief-0 (killed on a second SIGINT).")


@pytest.mark.parametrize(
    ("status", "stopped", "code"),
    [
        (SUCCEEDED, False, 0),
        (FAILED, False, 1),
        (RUNNING, True, EXIT_STOPPED),  # a stop is no failure
        ({}, True, EXIT_STOPPED),  # stopped before anything ran
        # The job finished before the stop took it: its own result.
        (SUCCEEDED, True, 0),
        (FAILED, True, 1),
    ],
)
def test_exit_code(status, stopped, code):
    assert exit_code(status, stopped) == code


def test_the_summary_of_a_stop_says_stopped_and_the_step_saved():
    lines = summary_lines(
        RUNNING, 1.0, [None], stopped=("TFJob a/b stopped at step 140, saved", 140)
    )
    rows = [line.strip() for line in lines]
    assert "state  Stopped: TFJob a/b stopped at step 140, saved" in rows
    assert "steps  140" in rows


def test_a_signal_inside_the_interrupt_handler_returns_and_the_next_one_hurries(tmp_path):
    """Ctrl-C and a SIGTERM close together run the handler inside itself: it returns wherever
    the first one is (no lock held across it), and a later signal kills the tasks now."""
    runner = LocalRunner(tfjob(name="local", replicas={"Chief": 1}), tmp_path)
    assert handled_again_everywhere(runner.interrupt, signal.SIGINT) > 1
    assert runner.stopping and runner.cause == "SIGINT"
    runner.interrupt(signal.SIGTERM, None)
    assert runner.hurry and runner.cause == "SIGINT"
