"""Reference points for benchmarks/trainer.py, measured in the same run on the same machine:

- `raw`: the leanest TensorFlow loop there is (plain variables, SGD, in-memory data, 1000 steps
  per tf.function call): what this machine can do at best for the model;
- `fit`: Keras `model.fit` in one process, the usual way to train a Keras model.

Prints one line: `examples/s <number>`.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf


def raw(hidden: int, batch: int, steps: int) -> float:
    x = tf.random.uniform([10_000, 784])
    y = tf.random.uniform([10_000], 0, 10, tf.int32)
    weights = [
        tf.Variable(tf.random.normal([784, hidden], stddev=0.05)),
        tf.Variable(tf.zeros([hidden])),
        tf.Variable(tf.random.normal([hidden, 10], stddev=0.05)),
        tf.Variable(tf.zeros([10])),
    ]

    @tf.function
    def train(n: tf.Tensor) -> tf.Tensor:
        loss = tf.constant(0.0)
        for _ in tf.range(n):
            idx = tf.random.uniform([batch], 0, 10_000, tf.int32)
            xb, yb = tf.gather(x, idx), tf.gather(y, idx)
            with tf.GradientTape() as tape:
                w1, b1, w2, b2 = weights
                logits = tf.matmul(tf.nn.relu(tf.matmul(xb, w1) + b1), w2) + b2
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits)
                )
            for v, g in zip(weights, tape.gradient(loss, weights), strict=True):
                v.assign_sub(0.01 * g)
        return loss

    train(tf.constant(10))
    start = time.perf_counter()
    float(train(tf.constant(steps)))
    return steps * batch / (time.perf_counter() - start)


def fit(hidden: int, batch: int, steps: int) -> float:
    x = np.random.default_rng(0).random((10_000, 784), dtype=np.float32)
    y = np.random.default_rng(1).integers(0, 10, 10_000)
    model = keras.Sequential(
        [keras.Input((784,)), keras.layers.Dense(hidden, activation="relu"), keras.layers.Dense(10)]
    )
    model.compile(
        keras.optimizers.Adam(0.001), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0)  # warm-up: tracing
    epochs = max(1, steps * batch // 10_000)
    start = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=epochs, verbose=0)
    return epochs * (10_000 // batch) * batch / (time.perf_counter() - start)


if __name__ == "__main__":
    kind, hidden, batch, steps = sys.argv[1], *map(int, sys.argv[2:5])
    rate = {"raw": raw, "fit": fit}[kind](hidden, batch, steps)
    print(f"examples/s {rate:.0f}")
