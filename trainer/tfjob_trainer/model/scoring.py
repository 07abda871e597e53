"""MNIST's loss and test-set accuracy, as between-graph training and the tests score an
exported model."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from ..data.mnist import Files, read_test


def per_example_loss(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """Cross-entropy per example; the step averages it, the evaluator takes its mean."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def test_accuracy(model: keras.Model, files: Files, batch: int = 2000) -> float:
    """The share of the test set the model classifies right, scored on this host in batches."""
    x, y = read_test(files)
    correct = 0
    for i in range(0, len(x), batch):
        logits = model(x[i : i + batch].astype(np.float32) / 255.0, training=False)
        correct += int(np.sum(np.argmax(np.asarray(logits), axis=1) == y[i : i + batch]))
    return correct / len(x)
