"""The Evaluator: follows the chief's checkpoints and writes test accuracy for TensorBoard.

It is not part of the training cluster; it only reads checkpoints from the shared directory.
`checkpoints_iterator` may skip a checkpoint written while an evaluation runs, so the final one
is evaluated explicitly before it exits 0.
"""

from __future__ import annotations

import logging

import numpy as np
import tensorflow as tf

from tfjob_protocol.result import Result

from . import result, summaries
from .config import Task
from .data import Files, read_test
from .model import build_model
from .options import Options
from .steps import per_example_loss

log = logging.getLogger(__name__)


def run(opts: Options, files: Files | None, task: Task | None) -> Result:
    """Evaluate each new checkpoint until one of the last step; `task` plays no part (the
    evaluator is outside the training cluster)."""
    assert files is not None
    model = build_model(opts.model, opts.hidden_units)
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    checkpoint = tf.train.Checkpoint(step=step, model=model)
    writer = summaries.writer(opts, "eval")
    x, y = read_test(files)
    x = x.astype(np.float32) / 255.0
    evaluated: list[tuple[int, float, float]] = []

    def evaluate(path: str) -> int:
        checkpoint.restore(path).expect_partial()
        logits = model(x, training=False)
        loss = float(tf.reduce_mean(per_example_loss(y.astype(np.int32), logits)))
        accuracy = float(np.mean(np.argmax(np.asarray(logits), axis=1) == y))
        at = int(step.numpy())
        with writer.as_default(step=at):
            tf.summary.scalar("accuracy", accuracy)
            tf.summary.scalar("loss", loss)
        writer.flush()
        print(f"eval step {at}, accuracy = {accuracy:.4f}, loss = {loss:.3f}", flush=True)
        evaluated.append((at, accuracy, loss))
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
    at, accuracy, loss = evaluated[-1]
    return result.evaluated(steps=at, test_accuracy=accuracy, loss=loss, evaluations=len(evaluated))
