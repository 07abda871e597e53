"""The input functions the trainer calls (`--input=tabular_example.data:train`,
`--eval-input=tabular_example.data:evaluation`): one per input pipeline, each given the
pipeline's `tf.distribute.InputContext`, the per-replica batch size and `--data-dir`.

`tfjob_trainer.datadir` does the part that is easy to get wrong, which files (or records) this
pipeline reads; what remains is ours: the record layout, shuffling, batching and repetition.
"""

from __future__ import annotations

import os

import tensorflow as tf

from tfjob_trainer import datadir

from .schema import COLUMNS, EVAL_PATTERN, FEATURES, TARGET, TRAIN_PATTERN

SPEC = {
    FEATURES: tf.io.FixedLenFeature([COLUMNS], tf.float32),
    TARGET: tf.io.FixedLenFeature([1], tf.float32),  # (batch, 1), as the model's output
}
SHUFFLE = 4096  # examples: a quarter of the train split, enough to mix the files read at once


def parse(serialized: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """A batch of serialized tf.train.Example into (features, target): parsing a whole batch
    in one op is much cheaper than one example at a time."""
    parsed = tf.io.parse_example(serialized, SPEC)
    return parsed[FEATURES], parsed[TARGET]


def records(
    ctx: tf.distribute.InputContext, data_dir: str | os.PathLike[str] | None, pattern: str
) -> tf.data.Dataset:
    """This pipeline's share of the serialized examples in the files matching `pattern`."""
    return datadir.sharded(ctx, datadir.files(data_dir, pattern), tf.data.TFRecordDataset)


def train(
    ctx: tf.distribute.InputContext,
    *,
    batch_size: int,
    data_dir: str | os.PathLike[str] | None,
) -> tf.data.Dataset:
    """Shuffled batches of the train split, forever: the trainer decides when to stop."""
    examples = records(ctx, data_dir, TRAIN_PATTERN).shuffle(SHUFFLE)
    batches = examples.repeat().batch(batch_size, drop_remainder=True)
    return batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def evaluation(
    ctx: tf.distribute.InputContext,
    *,
    batch_size: int,
    data_dir: str | os.PathLike[str] | None,
) -> tf.data.Dataset:
    """The eval split once, in order, the last batch possibly short: every example counts."""
    batches = records(ctx, data_dir, EVAL_PATTERN).batch(batch_size)
    return batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
