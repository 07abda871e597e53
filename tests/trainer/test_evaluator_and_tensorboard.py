"""The Evaluator follows the chief's checkpoints; both write TensorBoard scalars."""

from __future__ import annotations

import pytest

from tests.trainer.launcher import scalars


def test_evaluator_writes_eval_summaries_and_exits_0(make_job):
    job = make_job({"worker": 1, "evaluator": 1}, "--steps", "100", "--eval-timeout", "120")
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
    assert train["loss"][-1][1] < train["loss"][0][1]
