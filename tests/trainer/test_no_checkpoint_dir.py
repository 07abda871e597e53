"""Without a checkpoint directory a job trains anyway, into a temporary directory of each task
that writes checkpoints, and each such task says once that a restart cannot resume."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import tensorflow as tf

from tfjob_protocol.result import parse_last
from tfjob_testbed.project.launcher import FAST

WARNING = re.compile(
    r"WARNING no checkpoint directory \(--checkpoint-dir or TFJOB_CHECKPOINT_DIR\): "
    r"(checkpoints, TensorBoard logs and the export|checkpoints and TensorBoard logs) go to "
    r"the temporary (\S+), so a restarted replica starts again from step 0 and cannot resume$",
    re.M,
)


@pytest.fixture
def scratch() -> Iterator[Callable[..., Path]]:
    """The temporary directory a task's one warning names; removed after the test."""
    found: list[Path] = []

    def scratch_of(
        output: str, written: str = "checkpoints, TensorBoard logs and the export"
    ) -> Path:
        named = WARNING.findall(output)
        assert len(named) == 1, output[-3000:]
        assert named[0][0] == written
        found.append(Path(named[0][1]))
        return found[-1]

    yield scratch_of
    for path in found:
        shutil.rmtree(path, ignore_errors=True)


def saved_step(result: dict, where: Path, export: Path | None = None) -> int:
    """The step of the checkpoint the result line names, which is the newest in `where`, and
    the export it names exists (by default in `where`)."""
    assert result["checkpoint"] == tf.train.latest_checkpoint(str(where))
    assert result["export"] == str((export or where / "export") / "model.keras")
    assert Path(result["export"]).is_file()
    return int(result["checkpoint"].rsplit("-", 1)[1])


@pytest.mark.parametrize("export", [False, True], ids=["export-in-scratch", "export-dir"])
def test_one_process_trains_and_says_it_cannot_resume(scratch, tmp_path, export):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "TFJOB_CHECKPOINT_DIR")}
    cwd, out = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfjob_trainer",
            *FAST,
            "--steps",
            "20",
            *(["--export-dir", str(out)] if export else []),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = parse_last(proc.stdout)
    assert result is not None and result["strategy"] == "mirrored" and result["steps"] == 20
    if export:
        where = scratch(proc.stderr, "checkpoints and TensorBoard logs")
        assert saved_step(result, where, out) == 20
    else:
        where = scratch(proc.stderr)
        assert saved_step(result, where) == 20
    assert list(where.glob("logs/train/events.out.tfevents.*")), "TensorBoard logs are there"
    assert list(cwd.iterdir()) == [], "nothing lands in the working directory"


def test_parameter_server_chief_trains_and_only_it_warns(make_job, scratch):
    job = make_job(
        {"chief": 1, "worker": 1, "ps": 1},
        "--strategy",
        "parameter-server",
        "--steps",
        "40",
        checkpoints=False,
    )
    job.start_all()
    chief = job.wait("chief-0", 300)
    assert chief.popen.returncode == 0, chief.tail()
    result = chief.result()
    assert result["steps"] == 40 and result["trained_steps"] == 40
    assert saved_step(result, scratch(chief.output())) == 40
    for name in ("worker-0", "ps-0"):
        assert not WARNING.search(job.procs[name].output()), f"{name} writes no checkpoints"
    assert not job.checkpoint_dir.exists()


def test_multi_worker_mirrored_trains_and_every_worker_warns(make_job, scratch):
    job = make_job(
        {"worker": 2}, "--strategy", "multi-worker-mirrored", "--steps", "40", checkpoints=False
    )
    job.start_all()
    procs = [job.wait(f"worker-{i}", 300) for i in range(2)]
    for proc in procs:
        assert proc.popen.returncode == 0, proc.tail()
    chief, other = (proc.result() for proc in procs)
    assert chief["steps"] == other["steps"] == 40 and chief["replicas"] == 2
    assert saved_step(chief, scratch(procs[0].output())) == 40
    scratch(procs[1].output())  # it saves too (saving is collective), elsewhere
    assert not job.checkpoint_dir.exists()


def test_between_graph_chief_trains_and_only_it_warns(make_job, scratch):
    job = make_job(
        {"ps": 1, "worker": 2}, "--strategy", "between-graph", "--steps", "40", checkpoints=False
    )
    job.start_all()
    procs = [job.wait(f"worker-{i}", 300) for i in range(2)]
    for proc in procs:
        assert proc.popen.returncode == 0, proc.tail()
    result = procs[0].result()
    assert result["steps"] >= 40
    assert saved_step(result, scratch(procs[0].output())) >= 40
    assert not WARNING.search(procs[1].output()), "a worker that is not the chief saves nothing"
    assert not job.checkpoint_dir.exists()
