"""What a TF2 replica computes: the loss, one training step, and the test-set accuracy the
chief reports at the end."""

from __future__ import annotations

from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

from .data import Files, read_test

StepFn = Callable[[tf.Tensor, tf.Tensor], tuple[tf.Tensor, tf.Tensor]]


def per_example_loss(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """Cross-entropy per example; the step averages it, the evaluator takes its mean."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def make_step_fn(
    model: keras.Model, optimizer: keras.optimizers.Optimizer, global_batch: int
) -> StepFn:
    """One replica's step: loss averaged over the global batch, so replicas' sums add up."""

    def step_fn(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.nn.compute_average_loss(
                per_example_loss(y, logits), global_batch_size=global_batch
            )
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        correct = tf.cast(tf.equal(tf.argmax(logits, 1, output_type=tf.int32), y), tf.float32)
        return loss, tf.reduce_sum(correct) / global_batch

    return step_fn


def test_accuracy(model: keras.Model, files: Files, batch: int = 2000) -> float:
    """The share of the test set the model classifies right, scored on this host in batches."""
    x, y = read_test(files)
    correct = 0
    for i in range(0, len(x), batch):
        logits = model(x[i : i + batch].astype(np.float32) / 255.0, training=False)
        correct += int(np.sum(np.argmax(np.asarray(logits), axis=1) == y[i : i + batch]))
    return correct / len(x)
