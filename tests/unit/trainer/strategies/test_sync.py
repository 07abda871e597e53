"""The single-device loop (`sync.memory_loop`): a call trains n steps and counts them. (Its
batches: data/test_inputs.py; how many steps a call runs: test_options.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfjob_trainer import options
from tfjob_trainer.data import inputs
from tfjob_trainer.model import trainable
from tfjob_trainer.strategies import sync


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_a_call_trains_n_steps_and_counts_them(files, kind):
    opts = options.parse(["--model", kind, "--hidden-units", "16", "--batch-size", "8"])
    t = trainable.prepare(opts, files)
    net, optimizer = t.model, t.optimizer
    step = tf.Variable(4, dtype=tf.int64)
    before = [w.numpy().copy() for w in net.trainable_variables]
    batches = inputs.MemoryBatches(files, 8)
    loop = sync.memory_loop(
        tf.distribute.get_strategy(), trainable.make_step_fn(t), step, batches,
        jit=kind in sync.XLA_MODELS,
    )  # fmt: skip
    loss, (accuracy,) = loop(tf.constant(3))
    assert t.metrics.names == ["accuracy"]
    assert int(step.numpy()) == 7 and int(optimizer.iterations.numpy()) == 3
    assert np.isfinite(float(loss)) and 0.0 <= float(accuracy) <= 1.0
    assert any(
        not np.array_equal(b, w.numpy())
        for b, w in zip(before, net.trainable_variables, strict=True)
    )
