"""`tfjob run`: a TFJob manifest as local processes, under the operator's own rules."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tensorflow as tf
import yaml

from tfjob_protocol.local import ENV_LOCAL_PARENT
from tfjob_protocol.stop import ENV_GRACE_PERIOD, EXIT_STOPPED
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.paths import ROOT

TRAIN = ["--dataset=digits", "--batch-size=32", "--log-every=20"]


def manifest(tmp_path: Path, body: dict) -> Path:
    body["metadata"].pop("uid", None)
    body["metadata"].pop("namespace", None)  # as users write them: tfjob run says "local"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def ps_job(steps: int, **spec) -> dict:
    body = tfjob(
        name="local",
        replicas={"Chief": 1, "PS": 1, "Worker": 2},
        checkpoint={"storage": {"size": "1Gi"}},
        **spec,
    )
    for rt, rs in body["spec"]["tfReplicaSpecs"].items():
        container = rs["template"]["spec"]["containers"][0]
        container.pop("command", None)
        container["args"] = ["--strategy=parameter-server", *TRAIN] + (
            [f"--steps={steps}"] if rt == "Chief" else []
        )
    return body


# What TensorFlow's C++ start-up says on this machine's CPUs (x86 with AVX2 and FMA).
CHATTER = ("cpu_feature_guard.cc", "absl::InitializeLog", "To enable the following instructions")


def tfjob_run(path: Path, workdir: Path, *extra: str, **kw) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tfjob_operator.cli",
            "run",
            str(path),
            "--workdir",
            str(workdir),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        **kw,
    )


def processes_using(workdir: Path) -> list[int]:
    """Live processes whose environment names this run's checkpoint directory."""
    return processes_with(f"TFJOB_CHECKPOINT_DIR={workdir / 'checkpoints'}")


def task_of(pid: int) -> dict[str, object]:
    """The task (TF_CONFIG's) a live process runs; OSError once it is gone."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    env = dict(e.split(b"=", 1) for e in environ if b"=" in e)
    task: dict[str, object] = json.loads(env.get(b"TF_CONFIG", b"{}")).get("task") or {}
    return task


def described(pids: list[int]) -> list[str]:
    """Each process with its task and state, for a failure's message."""
    out = []
    for pid in pids:
        try:
            task = task_of(pid)
            state = Path(f"/proc/{pid}/status").read_text().split("State:", 1)[1].split("\n")[0]
            out.append(f"{pid} {task} {state.strip()}")
        except (OSError, ValueError, IndexError):
            out.append(str(pid))
    return out


def tasks_of(pids: list[int]) -> set[str]:
    """The tasks (type:index) these processes run: a task's supervisor and the task itself
    (`tfjob_trainer.runtime.supervisor`) are one."""
    found = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            task = task_of(pid)
            found.add(f"{task.get('type')}:{task.get('index')}")
    return found


def processes_with(env_entry: str) -> list[int]:
    """Live processes with this `NAME=value` in their environment."""
    marker = env_entry.encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def wait_for_training(proc: subprocess.Popen[str], chief: str = "chief-0") -> None:
    """Until the chief's first report. Four TensorFlow processes start on two cores: under a
    loaded machine's CI their imports alone take a minute."""
    deadline = time.monotonic() + 300
    assert proc.stdout is not None
    for line in proc.stdout:
        if f"[{chief}] step 20," in line:
            return
        assert time.monotonic() < deadline, "no training step within 300 s"
    raise AssertionError(f"tfjob run ended ({proc.wait()}) before the chief's first report")


def kill_tasks(proc: subprocess.Popen[str]) -> None:
    """Whatever a test left: no task of this run trains or serves on behind the suite (a PS
    job of 100000 steps would load every test after it)."""
    for pid in processes_with(f"{ENV_LOCAL_PARENT}={proc.pid}"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.smoke
def test_ps_job_runs_to_success_with_prefixed_output_and_a_summary(tmp_path):
    workdir = tmp_path / "run"
    proc = tfjob_run(manifest(tmp_path, ps_job(60)), workdir)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    assert "[tfjob] Chief: image 'python:3.11' is not run here" in out
    assert "[chief-0] step 60, loss = " in out and "[worker-1] " in out
    # Quiet by default: none of TensorFlow's C++ start-up lines, for any of the 4 processes.
    assert not [line for line in out.splitlines() if any(c in line for c in CHATTER)]
    assert "[tfjob] TFJobSucceeded: TFJob local/local successfully completed" in out
    summary = out[out.rindex("state  ") :]
    assert "state  Succeeded" in summary and "steps  60" in summary
    assert f"tensorboard --logdir {workdir / 'checkpoints' / 'logs'}" in summary
    assert (workdir / "checkpoints" / "export" / "model.keras").exists()
    assert processes_using(workdir) == [], "the ps and workers are stopped"


def test_a_job_without_a_checkpoint_section_checkpoints_under_the_workdir(tmp_path):
    # As Kubeflow manifests come: no `checkpoint:`; only workers, so MultiWorkerMirrored.
    body = tfjob(name="local", replicas={"Worker": 2})
    assert "checkpoint" not in body["spec"]
    for rs in body["spec"]["tfReplicaSpecs"].values():
        container = rs["template"]["spec"]["containers"][0]
        container["command"] = ["python", "-m", "tfjob_trainer"]
        container["args"] = ["--strategy=multi-worker-mirrored", *TRAIN, "--steps=40"]
    workdir = tmp_path / "run"
    proc = tfjob_run(manifest(tmp_path, body), workdir, "--verbose")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    assert "no checkpoint directory" not in out
    # --verbose shows TensorFlow's C++ start-up too, prefixed like every line.
    assert "[worker-1] " + "I0000" in out and any(c in out for c in CHATTER)
    checkpoints = workdir / "checkpoints"
    assert tf.train.latest_checkpoint(str(checkpoints)) == str(checkpoints / "ckpt-40")
    assert (checkpoints / "export" / "model.keras").is_file()
    assert list((checkpoints / "logs" / "train").glob("events.out.tfevents.*"))
    summary = out[out.rindex("state  ") :]
    assert "state  Succeeded" in summary and f"checkpoint  {checkpoints / 'ckpt-40'}" in summary


def test_worker_exit_1_under_never_fails_with_the_operators_message(tmp_path):
    body = tfjob(name="local", replicas={"Worker": 2})
    for rs in body["spec"]["tfReplicaSpecs"].values():
        rs["template"]["spec"]["containers"][0]["command"] = [
            "python",
            "-c",
            "import os, sys, time; i = int(os.environ['TFJOB_TASK_INDEX']); "
            "time.sleep(0.5 if i else 60); sys.exit(1)",
        ]
    proc = tfjob_run(manifest(tmp_path, body), tmp_path / "run")
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1
    assert (
        "state  Failed: TFJob local/local failed: Worker pod local-worker-1 exited with "
        "code 1 (Error) under restartPolicy Never."
    ) in out


def test_invalid_job_gets_the_operators_validation_message(tmp_path):
    proc = tfjob_run(
        manifest(tmp_path, tfjob(name="local", replicas={"Chief": 2})), tmp_path / "run"
    )
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "at most 1 Chief" in out and "a job needs a Worker or a Chief" not in out


def env_of(pid: int) -> dict[str, str]:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(e.decode().split("=", 1) for e in environ if b"=" in e)


@pytest.mark.smoke
def test_ctrl_c_stops_the_job_as_a_cluster_does_the_chief_saving_its_step(tmp_path):
    """Every task gets SIGTERM at once, within its pod's grace period; the chief saves the
    step it is on and names it, and the summary says so: a stop, no failure."""
    workdir = tmp_path / "run"
    body = ps_job(100_000, run_policy={"terminationGracePeriodSeconds": 45})
    chief = body["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]
    chief["terminationGracePeriodSeconds"] = 60  # a template's own wins, as on a cluster
    # Started as a background job of a non-interactive shell is: with SIGINT ignored, which
    # Python keeps unless the program sets its own handler.
    proc = tfjob_run(
        manifest(tmp_path, body),
        workdir,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    tasks = f"{ENV_LOCAL_PARENT}={proc.pid}"
    try:
        wait_for_training(proc)
        graces = set()
        for pid in processes_with(tasks):
            with contextlib.suppress(OSError):
                env = env_of(pid)
                graces.add((json.loads(env["TF_CONFIG"])["task"]["type"], env[ENV_GRACE_PERIOD]))
        assert graces == {("chief", "60"), ("ps", "45"), ("worker", "45")}
        # chief and two workers (ps has no volume), each a task and its supervisor
        assert len(tasks_of(processes_using(workdir))) == 3
        os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == EXIT_STOPPED, out[-3000:]
        assert "[tfjob] SIGINT: stopping every task as a cluster stops its pods" in out
        summary = out[out.rindex("state  ") :]
        saved = re.search(
            r"state  Stopped: TFJob local/local stopped at step (\d+), saved;", summary
        )
        assert saved, out[-3000:]
        step = int(saved[1])
        assert step >= 20 and f"steps  {step}" in summary
        assert "Not stopped cleanly" not in summary, out[-3000:]
        checkpoints = workdir / "checkpoints"
        assert tf.train.latest_checkpoint(str(checkpoints)) == str(checkpoints / f"ckpt-{step}")
        assert processes_with(tasks) == [], described(processes_with(tasks))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        kill_tasks(proc)


def test_sigterm_stops_a_multi_worker_mirrored_job_as_ctrl_c_does(tmp_path):
    """SIGTERM to `tfjob run` (a service manager's stop) is the same stop: the workers agree on
    the step, save it together, and the summary names it."""
    body = tfjob(name="local", replicas={"Worker": 2})
    for rs in body["spec"]["tfReplicaSpecs"].values():
        container = rs["template"]["spec"]["containers"][0]
        container.pop("command", None)
        container["args"] = ["--strategy=multi-worker-mirrored", *TRAIN, "--steps=100000"]
    workdir = tmp_path / "run"
    proc = tfjob_run(manifest(tmp_path, body), workdir)
    tasks = f"{ENV_LOCAL_PARENT}={proc.pid}"
    try:
        wait_for_training(proc, chief="worker-0")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == EXIT_STOPPED, out[-3000:]
        summary = out[out.rindex("state  ") :]
        saved = re.search(r"Stopped: TFJob local/local stopped at step (\d+), saved;", summary)
        assert saved and "Not stopped cleanly" not in summary, out[-3000:]
        checkpoints = workdir / "checkpoints"
        step = int(saved[1])
        assert tf.train.latest_checkpoint(str(checkpoints)) == str(checkpoints / f"ckpt-{step}")
        assert processes_with(tasks) == [], described(processes_with(tasks))
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_tasks(proc)


def test_a_killed_tfjob_run_takes_every_task_with_it(tmp_path):
    """Even SIGKILL, which tfjob run cannot handle: the parameter server and the workers serve
    until stopped, and would serve on forever behind it."""
    proc = tfjob_run(manifest(tmp_path, ps_job(100_000)), tmp_path / "run")
    tasks = f"{ENV_LOCAL_PARENT}={proc.pid}"
    try:
        wait_for_training(proc)
        assert len(tasks_of(processes_with(tasks))) == 4  # chief, ps and two workers
        proc.kill()
        proc.wait(30)
        deadline = time.monotonic() + 60
        while processes_with(tasks):
            assert time.monotonic() < deadline, f"still running: {described(processes_with(tasks))}"
            time.sleep(0.2)
    finally:
        kill_tasks(proc)
