"""The data, generated from a seed: y = x . w + offset[kind] + noise."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

WEIGHTS = np.array([1.0, -2.0, 0.5, 3.0, 0.0, 1.5, -1.0, 0.25], dtype=np.float32)
OFFSETS = np.array([0.0, 2.0, -1.0, 4.0], dtype=np.float32)


def examples(n: int, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8)).astype(np.float32)
    kind = rng.integers(0, len(OFFSETS), size=n)
    y = x @ WEIGHTS + OFFSETS[kind] + rng.normal(scale=0.1, size=n).astype(np.float32)
    return {"x": x, "kind": kind.astype(np.int64)}, y[:, None].astype(np.float32)


def train(ctx: tf.distribute.InputContext, *, batch_size: int, size: int = 8192) -> tf.data.Dataset:
    features, labels = examples(size, seed=0)
    ds = tf.data.Dataset.from_tensor_slices((features, labels))
    ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
    return ds.shuffle(size).repeat().batch(batch_size, drop_remainder=True).prefetch(2)


def evaluation(ctx: tf.distribute.InputContext, *, batch_size: int) -> tf.data.Dataset:
    features, labels = examples(1024, seed=1)
    return tf.data.Dataset.from_tensor_slices((features, labels)).batch(256)


def unlabelled(ctx: tf.distribute.InputContext, *, batch_size: int) -> tf.data.Dataset:
    """Features alone, no labels: not what a trainer can learn from."""
    features, _ = examples(256, seed=0)
    return tf.data.Dataset.from_tensor_slices(features).repeat().batch(batch_size)


def not_a_dataset(ctx: tf.distribute.InputContext, *, batch_size: int) -> list[int]:
    return [1, 2, 3]


def text_labels(ctx: tf.distribute.InputContext, *, batch_size: int) -> tf.data.Dataset:
    """Labels as strings, which no regression loss takes."""
    features, labels = examples(256, seed=0)
    text = labels[:, 0].astype(str)
    return tf.data.Dataset.from_tensor_slices((features, text)).repeat().batch(batch_size)
