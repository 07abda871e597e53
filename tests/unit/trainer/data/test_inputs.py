"""In-memory batches for the single-device loop: drawn in the graph, by step."""

from __future__ import annotations

import tensorflow as tf

from tfjob_trainer.data import inputs


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
