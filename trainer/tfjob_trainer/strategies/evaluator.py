"""The Evaluator: follows the chief's checkpoints and scores each on the evaluation input
(`--eval-input`, or MNIST's test set), writing the loss and the compiled metrics for
TensorBoard.

It is not part of the training cluster; it only reads checkpoints from the shared directory, and
evaluates in one process with Keras' own `Model.evaluate`, so every compiled metric counts,
stateful ones (AUC, precision, ...) included. `checkpoints_iterator` may skip a checkpoint
written while an evaluation runs, so the final one is evaluated explicitly before it exits 0.
"""

from __future__ import annotations

import logging

import tensorflow as tf

from tfjob_protocol.result import Result

from ..config import Task
from ..data.mnist import Files
from ..model import batch_metrics, trainable
from ..options import Options
from ..output import summaries, task_result

log = logging.getLogger(__name__)


def run(opts: Options, files: Files | None, task: Task | None) -> Result:
    """Evaluate each new checkpoint until one of the last step; `task` plays no part (the
    evaluator is outside the training cluster)."""
    batches = trainable.eval_batches(opts, files)
    # `__main__.check_functions` refused an Evaluator with no evaluation data, in one line.
    assert batches is not None
    t = trainable.prepare(opts, files, "eval-input")
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(step=step, model=t.model)
    writer = summaries.writer(opts, "eval")
    evaluated: list[tuple[int, dict[str, float]]] = []

    def evaluate(path: str) -> int:
        checkpoint.restore(path).expect_partial()
        scores = batch_metrics.evaluate(t.model, batches)
        at = int(step.numpy())
        with writer.as_default(step=at):
            for name, value in scores.items():
                tf.summary.scalar(name, value)
        writer.flush()
        print(f"eval step {at}, {line(scores)}", flush=True)
        evaluated.append((at, scores))
        return at

    last_path = None
    for path in tf.train.checkpoints_iterator(
        str(opts.checkpoint_dir), min_interval_secs=1, timeout=opts.eval_timeout
    ):
        last_path = path
        if evaluate(path) >= opts.steps:
            break
    latest = tf.train.latest_checkpoint(str(opts.checkpoint_dir))
    if latest and latest != last_path:
        evaluate(latest)
    if not evaluated or evaluated[-1][0] < opts.steps:
        raise TimeoutError(f"no checkpoint of step {opts.steps} within {opts.eval_timeout:.0f}s")
    at, scores = evaluated[-1]
    return task_result.evaluated(steps=at, evaluation=scores, evaluations=len(evaluated))


def line(scores: dict[str, float]) -> str:
    """`accuracy = 0.9712, loss = 0.101`: the metrics, then the loss."""
    metrics = [f"{k} = {v:.4f}" for k, v in scores.items() if k != "loss"]
    return ", ".join([*metrics, f"loss = {scores['loss']:.3f}"])
