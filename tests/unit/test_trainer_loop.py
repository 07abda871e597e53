"""The single-device loop: batches drawn in the graph, by step, and how many steps a call runs."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfjob_trainer import options
from tfjob_trainer.config import Task
from tfjob_trainer.data import inputs
from tfjob_trainer.data.mnist import Files
from tfjob_trainer.model import trainable
from tfjob_trainer.strategies import sync


@pytest.fixture
def files(tmp_path) -> Files:
    """100 examples whose first pixel is the example's own number and whose label is its
    number mod 10: a batch shows which examples it holds, and whether labels kept up."""
    n = 100
    images = np.zeros((n, 784), np.uint8)
    images[:, 0] = np.arange(n)
    paths = [tmp_path / name for name in ("ti", "tl", "ei", "el")]
    for path, array in zip(paths, [images, np.arange(n) % 10] * 2, strict=True):
        path.write_bytes(np.ascontiguousarray(array, np.uint8).tobytes())
    return Files(*paths, source="test", train_size=n, test_size=n)


def examples(batch: tuple[tf.Tensor, tf.Tensor]) -> tuple[list[int], list[int]]:
    x, y = batch
    return [round(v * 255) for v in x.numpy()[:, 0]], list(y.numpy())


def test_a_batch_depends_on_its_step_alone(files):
    first, again = inputs.MemoryBatches(files, 8), inputs.MemoryBatches(files, 8)
    ids, labels = examples(first(tf.constant(5, tf.int64)))
    assert examples(again(tf.constant(5, tf.int64))) == (ids, labels)  # a restart sees the same
    assert examples(first(tf.constant(6, tf.int64)))[0] != ids
    assert len(ids) == 8 and all(0 <= i < 100 for i in ids)
    assert labels == [i % 10 for i in ids]


def test_images_are_scaled_to_the_unit_interval(files):
    x, _ = inputs.MemoryBatches(files, 50)(tf.constant(0, tf.int64))
    assert x.dtype == tf.float32 and 0.0 <= float(tf.reduce_min(x)) <= float(tf.reduce_max(x)) <= 1


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


@pytest.mark.parametrize(
    ("flag", "one_device", "expected"),
    [([], True, 100), ([], False, 10), (["--steps-per-call", "7"], True, 7),
     (["--steps-per-call", "7"], False, 7)],
)  # fmt: skip
def test_steps_per_call(flag, one_device, expected):
    assert options.parse(flag).per_call(one_device) == expected


def test_each_task_that_trains_has_a_seed_of_its_own():
    cluster = {"chief": ["c:1"], "worker": ["w:1", "w:2"], "ps": ["p:1"]}
    ranks = [Task(cluster, t, i).rank for t, i in [("chief", 0), ("worker", 0), ("worker", 1)]]
    assert ranks == [0, 1, 2]
    # One order for every strategy that ranks its replicas: the chief first, then the workers.
    assert Task(cluster, "worker", 1).trainers == [("chief", 0), ("worker", 0), ("worker", 1)]
    master = {"master": ["m:1"], "worker": ["w:1"]}
    assert [Task(master, t, 0).rank for t in ("master", "worker")] == [0, 1]
