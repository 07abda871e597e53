"""The Evaluator follows the chief's checkpoints; both write TensorBoard scalars."""

from __future__ import annotations

import pytest

from tfjob_testbed.project.launcher import details, scalars


def test_evaluator_writes_eval_summaries_and_exits_0(make_job):
    job = make_job(
        {"worker": 1, "evaluator": 1},
        *("--steps", "100", "--eval-timeout", "120", "--histogram-every", "50"),
    )
    job.start("evaluator")  # first: it waits for the first checkpoint
    job.start("worker")
    trained = job.wait("worker-0", 300).result()
    evaluated = job.wait("evaluator-0", 300).result()
    assert job.procs["evaluator-0"].popen.returncode == 0
    assert trained["strategy"] == "mirrored"
    assert evaluated["steps"] == 100 and evaluated["evaluations"] >= 1
    assert evaluated["test_accuracy"] == trained["test_accuracy"], "same final model"

    logs = job.checkpoint_dir / "logs"
    evals = scalars(logs / "eval")
    step, accuracy = evals["accuracy"][-1]
    assert step == 100 and accuracy == pytest.approx(evaluated["test_accuracy"], abs=1e-6)
    train = scalars(logs / "train")
    assert {"loss", "accuracy", "examples_per_sec"} <= set(train)
    assert [s for s, _ in train["loss"]] == [20, 40, 60, 80, 100]
    # The first report writes a histogram of every weight and a few input images; then every
    # --histogram-every steps (50 here).
    written = details(logs / "train")
    assert written["histograms"] == {
        "mnist_mlp/dense/kernel": [20, 80],
        "mnist_mlp/dense/bias": [20, 80],
        "mnist_mlp/dense_1/kernel": [20, 80],
        "mnist_mlp/dense_1/bias": [20, 80],
    }, written
    assert written["images"] == {"input": [20]}
    assert train["loss"][-1][1] < train["loss"][0][1]
