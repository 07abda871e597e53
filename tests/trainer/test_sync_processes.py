"""Synchronous training: MultiWorkerMirroredStrategy across processes, MirroredStrategy across
two logical CPU devices in one process."""

from __future__ import annotations

import signal

import pytest
import tensorflow as tf

from tfjob_protocol.stop import EXIT_STOPPED
from tfjob_trainer.runtime.exit_codes import EXIT_PEER_LOST
from tfjob_trainer.strategies.sync import SCRATCH_PREFIX

# Ten classes (chance 0.10); synchronous Adam on digits passes 0.95 within 100 steps.
MIN_ACCURACY = 0.9


@pytest.mark.smoke
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


@pytest.mark.parametrize("end", ["done", "stopped", "peer-lost"])
def test_a_multi_worker_mirrored_worker_leaves_no_copy_of_its_saves(
    make_job, monkeypatch, tmp_path, end
):
    """A worker that is not the chief saves with it (saving is collective) into a temporary
    directory of its own: gone once it is done, however it ends: trained to the end, stopped
    on request after its save, or failed for a lost peer."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    steps = "40" if end == "done" else "100000"
    job = make_job({"worker": 2}, "--strategy", "multi-worker-mirrored", "--steps", steps)
    job.start_all()
    if end == "done":
        assert job.wait("worker-0", 300).result()["steps"] == 40
    else:
        job.wait_for_line("worker-1", "saved ", 300)  # its copy of a save exists
        assert list(scratch.glob(f"{SCRATCH_PREFIX}*/ckpt-*")), "the copy under TMPDIR"
        if end == "stopped":
            for name in job.procs:
                job.kill(name, signal.SIGTERM, group=False)  # as the kubelet does
        else:
            job.kill("worker-0", signal.SIGKILL)
    code = {"done": 0, "stopped": EXIT_STOPPED, "peer-lost": EXIT_PEER_LOST}[end]
    worker = job.wait("worker-1", 120)
    assert worker.popen.returncode == code, worker.tail()
    assert "Traceback" not in worker.output(), worker.tail()
    assert not list(scratch.glob(f"{SCRATCH_PREFIX}*")), worker.tail()


def test_multi_worker_with_a_chief_that_trains_too(make_job):
    job = make_job({"chief": 1, "worker": 1}, "--strategy", "auto", "--steps", "40")
    job.start_all()
    chief = job.wait("chief-0", 300).result()
    job.wait("worker-0", 300)
    assert chief["strategy"] == "multi-worker-mirrored" and chief["replicas"] == 2


@pytest.mark.smoke
def test_mirrored_on_two_logical_cpus(make_job):
    job = make_job({"worker": 1}, "--strategy", "mirrored", "--cpu-devices", "2", "--steps", "100")
    job.start("worker")
    result = job.wait("worker-0", 300).result()
    assert result["replicas"] == 2 and result["steps"] == 100
    assert result["test_accuracy"] > MIN_ACCURACY
    # Restarted after it finished: nothing to do, exits 0 at once.
    job.start("worker")
    again = job.wait("worker-0", 300)
    assert again.popen.returncode == 0 and again.result()["trained_steps"] == 0


def test_cnn_model_trains(make_job):
    job = make_job({"worker": 1}, "--model", "cnn", "--steps", "40")
    job.start("worker")
    assert job.wait("worker-0", 300).result()["steps"] == 40
    assert (job.checkpoint_dir / "export" / "model.keras").exists()
