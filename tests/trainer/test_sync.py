"""Synchronous training: MultiWorkerMirroredStrategy across processes, MirroredStrategy across
two logical CPU devices in one process."""

from __future__ import annotations

import subprocess
import sys

import tensorflow as tf

from tests.trainer.launcher import RESULT_PREFIX, ROOT

# Ten classes (chance 0.10); synchronous Adam on digits passes 0.95 within 100 steps.
MIN_ACCURACY = 0.9


def test_multi_worker_mirrored_trains_and_a_restart_resumes(make_job):
    job = make_job({"worker": 2}, "--strategy", "multi-worker-mirrored", "--steps", "100")
    job.start_all()
    first = job.wait("worker-0", 300).result()
    other = job.wait("worker-1", 300).result()
    assert first["steps"] == other["steps"] == 100
    assert first["replicas"] == 2 and first["test_accuracy"] > MIN_ACCURACY
    assert other["test_accuracy"] is None, "only the chief evaluates and exports"
    assert tf.train.latest_checkpoint(str(job.checkpoint_dir)).endswith("-100")
    assert (job.checkpoint_dir / "export" / "model.keras").exists()
    losses = [
        float(ln.split("loss = ")[1].split()[0])
        for ln in job.procs["worker-0"].output().splitlines()
        if ln.startswith("step ")
    ]
    assert losses[-1] < losses[0]

    job.args[job.args.index("--steps") + 1] = "140"
    job.start_all()
    again = job.wait("worker-0", 300).result()
    job.wait("worker-1", 300)
    assert "at step 100" in job.procs["worker-0"].output()
    assert again["steps"] == 140 and again["trained_steps"] == 40


def test_multi_worker_with_a_chief_that_trains_too(make_job):
    job = make_job({"chief": 1, "worker": 1}, "--strategy", "auto", "--steps", "40")
    job.start_all()
    chief = job.wait("chief-0", 300).result()
    job.wait("worker-0", 300)
    assert chief["strategy"] == "multi-worker-mirrored" and chief["replicas"] == 2


def test_mirrored_on_two_logical_cpus(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfjob_trainer",
            "--checkpoint-dir",
            str(tmp_path),
            "--dataset",
            "digits",
            "--steps",
            "100",
            "--log-every",
            "50",
            "--strategy",
            "mirrored",
            "--cpu-devices",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith(RESULT_PREFIX))
    import json

    result = json.loads(line[len(RESULT_PREFIX) :])
    assert result["replicas"] == 2 and result["steps"] == 100
    assert result["test_accuracy"] > MIN_ACCURACY
    # Restarted after it finished: nothing to do, exits 0 at once.
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfjob_trainer",
            "--checkpoint-dir",
            str(tmp_path),
            "--dataset",
            "digits",
            "--steps",
            "100",
            "--strategy",
            "mirrored",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert again.returncode == 0 and '"trained_steps": 0' in again.stdout


def test_cnn_model_trains(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfjob_trainer",
            "--checkpoint-dir",
            str(tmp_path),
            "--dataset",
            "digits",
            "--model",
            "cnn",
            "--steps",
            "40",
            "--log-every",
            "20",
            "--batch-size",
            "32",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert '"steps": 40' in proc.stdout and (tmp_path / "export" / "model.keras").exists()
