"""ParameterServerStrategy across processes: chief (coordinator) + 2 workers + 1 ps."""

from __future__ import annotations

import os
import signal

import pytest
import tensorflow as tf

from tfjob_protocol.stop import EXIT_STOPPED
from tfjob_testbed.project.launcher import details

PS = {"chief": 1, "worker": 2, "ps": 1}
# Ten digit classes: chance is 0.10. The 784-500-10 MLP gets above 0.95 on the held-out 297
# digits within a few hundred steps; 0.85 leaves room for asynchronous noise.
MIN_ACCURACY = 0.85


@pytest.mark.smoke
def test_trains_to_the_target_step_and_resumes_after_a_whole_job_restart(make_job):
    job = make_job(PS, "--strategy", "parameter-server", "--steps", "200")
    job.start_all()
    first = job.wait("chief-0", 300).result()
    assert job.procs["chief-0"].popen.returncode == 0
    assert first["steps"] >= 200 and first["strategy"] == "parameter-server"
    assert first["test_accuracy"] > MIN_ACCURACY
    assert tf.train.latest_checkpoint(str(job.checkpoint_dir)).endswith(f"-{first['steps']}")
    out = job.procs["chief-0"].output()
    assert "examples/sec; " in out and " sec/batch)" in out
    for name in ("worker-0", "worker-1", "ps-0"):
        assert job.procs[name].popen.poll() is None, f"{name} serves until scaled down"
    # The coordinator reads the weights from the parameter servers for their histograms.
    written = details(job.checkpoint_dir / "logs" / "train")
    assert len(written["histograms"]) == 4 and "mnist_mlp/dense/kernel" in written["histograms"]
    assert list(written["images"]) == ["input"]

    # The whole job restarts (as after a node loss): it continues from the checkpoint.
    job.stop_all()
    job.args[job.args.index("--steps") + 1] = "260"
    job.start_all()
    second = job.wait("chief-0", 300).result()
    assert f"at step {first['steps']}" in job.procs["chief-0"].output()
    assert second["steps"] >= 260
    assert second["trained_steps"] == second["steps"] - first["steps"]


@pytest.mark.skipif(os.geteuid() != 0, reason="hiding a directory takes a mount namespace (root)")
def test_parameter_servers_need_no_checkpoint_volume(make_job):
    """A TFJob mounts the checkpoint volume everywhere but on the parameter servers: the chief
    alone reads and writes the checkpoint files, also when it restores."""
    job = make_job(
        {"chief": 1, "worker": 1, "ps": 1},
        "--strategy", "parameter-server", "--steps", "30",
        unmounted=frozenset({"ps"}),
    )  # fmt: skip
    job.start_all()
    first = job.wait("chief-0", 300).result()
    assert job.procs["chief-0"].popen.returncode == 0, job.procs["chief-0"].tail()
    assert tf.train.latest_checkpoint(str(job.checkpoint_dir)).endswith(f"-{first['steps']}")
    job.stop_all()
    job.args[job.args.index("--steps") + 1] = "40"
    job.start_all()
    second = job.wait("chief-0", 300).result()
    assert f"at step {first['steps']}" in job.procs["chief-0"].output()
    assert second["steps"] == 40


@pytest.mark.parametrize("model", ["mlp", "cnn"])
def test_a_worker_on_one_cpu_trains(make_job, model):
    """A worker pinned to one CPU, as a pod with an exclusive core is: with TensorFlow's
    inter-op pool sized by its CPUs (one thread), its first closure hung forever."""
    job = make_job(
        {"chief": 1, "worker": 1, "ps": 1},
        "--strategy", "parameter-server", "--model", model, "--steps", "20",
        cpus={"worker-0": str(min(os.sched_getaffinity(0)))},
    )  # fmt: skip
    job.start_all()
    result = job.wait("chief-0", 300).result()
    assert result["steps"] == 20


def test_chief_finishes_when_a_worker_dies(make_job):
    job = make_job(PS, "--strategy", "parameter-server", "--steps", "300")
    job.start_all()
    job.wait_for_line("chief-0", "step 40,")
    job.kill("worker-1")
    result = job.wait("chief-0", 300).result()
    # Closures the lost worker ran but did not answer run again: trained twice, counted once.
    assert result["steps"] == 300


@pytest.mark.parametrize("steps_per_call", ["1", "10"])
def test_steps_per_call_reach_the_same_step(make_job, steps_per_call):
    job = make_job(
        {"chief": 1, "worker": 1, "ps": 1},
        "--strategy",
        "parameter-server",
        "--steps",
        "60",
        "--steps-per-call",
        steps_per_call,
    )
    job.start_all()
    assert job.wait("chief-0", 300).result()["steps"] >= 60


def test_a_serving_task_leaves_at_once_on_sigterm(make_job):
    """A deleted or scaled-down pod's server stops at SIGTERM, as stopped on request, instead of
    waiting in TensorFlow for the kubelet's SIGKILL (as a container's PID 1 ignores SIGTERM):
    with no chief up, nobody has to save from it first."""
    job = make_job({"chief": 1, "worker": 1, "ps": 1}, "--strategy", "parameter-server")
    job.start("ps")
    job.wait_for_line("ps-0", "ps 0 serving on", 120)
    job.kill("ps-0", signal.SIGTERM)
    assert job.wait("ps-0", 10).popen.returncode == EXIT_STOPPED
    assert "stopped by SIGTERM" in job.procs["ps-0"].output()
