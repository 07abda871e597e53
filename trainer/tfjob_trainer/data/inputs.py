"""The two ways training batches reach a TF2 step, both from the record files `mnist.prepare`
writes: a tf.data pipeline (parameter-server workers, several devices in one process) and
batches gathered inside the step (one replica per process)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from .mnist import IMAGE_BYTES, Files


def train_dataset(
    files: Files, batch_size: int, shards: int = 1, shard: int = 0, seed: int | None = 0
) -> tf.data.Dataset:
    """Repeated, reshuffled every epoch, one element per batch, read on the host that runs it.

    The record files are read whole into memory, and each element is a batch gathered by a
    shuffled index: tf.data then pays its per-element cost per batch, not per example.
    """
    images = tf.reshape(
        tf.io.decode_raw(tf.io.read_file(str(files.train_images)), tf.uint8), [-1, IMAGE_BYTES]
    )
    labels = tf.io.decode_raw(tf.io.read_file(str(files.train_labels)), tf.uint8)
    if shards > 1:
        images, labels = images[shard::shards], labels[shard::shards]
    n = tf.shape(labels)[0]
    per_epoch = n // batch_size

    def epoch(_: tf.Tensor) -> tf.data.Dataset:
        order = tf.random.shuffle(tf.range(n), seed=seed)[: per_epoch * batch_size]
        return tf.data.Dataset.from_tensor_slices(tf.reshape(order, [per_epoch, batch_size]))

    def gather(index: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        x = tf.cast(tf.gather(images, index), tf.float32) / 255.0
        return x, tf.cast(tf.gather(labels, index), tf.int32)

    ds = tf.data.Dataset.range(2**62).flat_map(epoch)
    return ds.map(gather, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


class MemoryBatches:
    """Batches gathered inside the training step from the record files held in memory.

    One device needs no tf.data pipeline: handing each batch over from its threads cost a
    single process a good part of the leanest loop's throughput on the MLP, and without it the
    whole loop of steps compiles into one XLA computation. A step's batch is drawn at
    random from the whole training set, seeded by the step's number: the batches depend on
    the step alone, so a run restarted from a checkpoint sees the batches it would have seen.
    (Epochs of a shuffled order are slower on the MLP: the order is carried through the loop.)
    """

    def __init__(self, files: Files, batch_size: int, seed: int = 0) -> None:
        images = np.frombuffer(files.train_images.read_bytes(), dtype=np.uint8)
        labels = np.frombuffer(files.train_labels.read_bytes(), dtype=np.uint8)
        self.size, self.batch_size, self.seed = len(labels), batch_size, seed
        # Variables, not constants: a graph does not carry a copy of the data set.
        self.images = tf.Variable(images.reshape(-1, IMAGE_BYTES), trainable=False)
        self.labels = tf.Variable(labels, trainable=False)

    def __call__(self, step: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The batch of global step `step` (int64): images scaled to [0, 1], int32 labels."""
        index = tf.random.stateless_uniform(
            [self.batch_size],
            seed=tf.stack([tf.constant(self.seed, tf.int64), step]),
            maxval=self.size,
            dtype=tf.int32,
        )
        x = tf.cast(tf.gather(self.images, index), tf.float32) / 255.0
        return x, tf.cast(tf.gather(self.labels, index), tf.int32)
