"""A user's own model and input (tests/trainer/userpkg/toyproject: not MNIST, a dict of two
named features, compiled by its own function) under every TF2 strategy: trained to a stated
loss, resumed after a kill at the exact step, exported, and followed by the Evaluator."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfjob_testbed.project.launcher import details, scalars
from tfjob_trainer.runtime.exit_codes import EXIT_PEER_LOST

USERPKG = Path(__file__).parent / "userpkg"
USER = [
    "--model=toyproject.models:regression",
    "--input=toyproject.data:train",
    "--eval-input=toyproject.data:evaluation",
    "--batch-size=32",
    "--log-every=50",
    "--checkpoint-every=50",
    "--peer-timeout=60",
    "--eval-timeout=120",
]
# The target's variance is about 18 and its noise's 0.01: a model that learnt nothing scores
# about 18, one that learnt the weights and offsets well under this.
MAX_LOSS = 0.25
# Asynchronous updates from two workers interleave as the two cores let them: the same 300 steps
# have ended at 0.31 under the suite's load. Still a 36th of the untrained model's loss.
ASYNC_MAX_LOSS = 0.5
UNTRAINED_LOSS = 18.0
RESTORED = re.compile(r"restored \S+ at step (\d+)")


@pytest.fixture(autouse=True)
def _user_project(monkeypatch):
    """The user's package importable by every task, as their image's PYTHONPATH makes it."""
    monkeypatch.setenv("PYTHONPATH", str(USERPKG))


def _check_export(result: dict) -> None:
    model = keras.models.load_model(result["export"])
    x = {"x": np.zeros((2, 8), np.float32), "kind": np.array([0, 3], np.int64)}
    assert model.predict(x, verbose=0).shape == (2, 1)


@pytest.mark.smoke
def test_parameter_servers_train_it_and_the_evaluator_follows(make_job):
    job = make_job(
        {"chief": 1, "ps": 1, "worker": 2, "evaluator": 1},
        *USER,
        "--strategy=parameter-server",
        "--steps=300",
    )
    job.start("evaluator")  # first: it waits for the first checkpoint
    for task_type in ("ps", "worker", "chief"):
        for i in range(job.replicas[task_type]):
            job.start(task_type, i)
    chief = job.wait("chief-0", 300).result()
    evaluated = job.wait("evaluator-0", 300).result()
    assert chief["steps"] == 300 and chief["evaluation"]["loss"] < ASYNC_MAX_LOSS, chief
    assert set(chief["metrics"]) == {"mae"} and "train_accuracy" not in chief
    assert evaluated["steps"] == 300 and evaluated["evaluation"]["loss"] < ASYNC_MAX_LOSS, evaluated
    assert evaluated["evaluation"] == pytest.approx(chief["evaluation"], rel=1e-4)
    _check_export(chief)

    logs = job.checkpoint_dir / "logs"
    train = scalars(logs / "train")
    assert {"loss", "mae", "examples_per_sec"} <= set(train), set(train)
    # The model learns within the first 50 steps, so from there on each logged loss, that of
    # one batch of 32, is noise around the floor: not ordered, but all far below an untrained
    # model's, and the last one is the loss the chief reported.
    assert all(loss < UNTRAINED_LOSS / 10 for _, loss in train["loss"]), train["loss"]
    assert train["loss"][-1][1] == pytest.approx(chief["loss"]), (train["loss"], chief)
    assert {"loss", "mae"} <= set(scalars(logs / "eval"))
    written = details(logs / "train")
    assert any(tag.endswith("embedding/embeddings") for tag in written["histograms"]), written
    assert written["images"] == {}, "a user's features are not images"


def test_a_killed_chief_resumes_at_the_checkpoint_and_ends_at_the_exact_step(make_job):
    job = make_job({"chief": 1, "ps": 1, "worker": 1}, *USER, "--strategy=parameter-server")
    job.start_all(["--steps=100000"])
    job.wait_for_line("chief-0", "at step 100")  # a checkpoint past the first
    job.kill("chief-0")
    job.start("chief", 0, ["--steps=300"])
    chief = job.wait("chief-0", 300).result()
    resumed = int(RESTORED.search(job.procs["chief-0"].output()).group(1))
    assert resumed >= 100 and resumed % 50 == 0
    assert chief["steps"] == 300 and chief["trained_steps"] == 300 - resumed
    assert chief["evaluation"]["loss"] < MAX_LOSS
    assert tf.train.latest_checkpoint(str(job.checkpoint_dir)).endswith("-300")


def test_multi_worker_mirrored_trains_it_and_resumes_after_a_lost_worker(make_job):
    job = make_job({"worker": 2}, *USER, "--strategy=multi-worker-mirrored", "--steps=300")
    job.start_all()
    job.wait_for_line("worker-0", "at step 100")
    job.kill("worker-1", signal.SIGKILL)
    assert job.wait("worker-0", 120).popen.returncode == EXIT_PEER_LOST
    job.start_all()
    first = job.wait("worker-0", 300).result()
    other = job.wait("worker-1", 300).result()
    resumed = int(RESTORED.search(job.procs["worker-0"].output()).group(1))
    assert resumed >= 100 and first["trained_steps"] == 300 - resumed
    assert first["steps"] == other["steps"] == 300 and first["replicas"] == 2
    assert first["evaluation"]["loss"] < MAX_LOSS, first
    assert "evaluation" not in other and other["export"] is None, "the chief's alone"
    _check_export(first)


def test_mirrored_trains_it_on_two_devices(make_job):
    job = make_job({"worker": 1}, *USER, "--strategy=mirrored", "--cpu-devices=2", "--steps=300")
    job.start("worker")
    result = job.wait("worker-0", 300).result()
    assert result["replicas"] == 2 and result["steps"] == 300
    assert result["evaluation"]["loss"] < MAX_LOSS, result
    _check_export(result)


def test_an_uncompiled_model_is_compiled_from_the_flags(make_job):
    job = make_job(
        {"worker": 1},
        *USER,
        "--model=toyproject.models:uncompiled",
        "--loss=mse",
        "--metrics=mae,mse",
        "--learning-rate=0.03",
        "--steps=300",
    )
    job.start("worker")
    result = job.wait("worker-0", 300).result()
    assert set(result["metrics"]) == {"mae", "mse"}
    assert result["evaluation"]["loss"] < MAX_LOSS, result
