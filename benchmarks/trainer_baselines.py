"""Reference points for the trainer benchmarks, measured in the same run on the same machine:

- `raw`: the leanest TensorFlow loop there is for the model: plain variables, the forward pass
  written with tf.nn ops, the update as TensorFlow's fused kernel (SGD, or Adam with the
  trainer's hyper-parameters), in-memory data gathered inside the graph, 1000 steps per
  tf.function call: what this machine can do at best for the model;
- `fit`: Keras `model.fit` in one process, the usual way to train a Keras model.

Run: `python benchmarks/trainer_baselines.py raw|fit MODEL HIDDEN BATCH STEPS [sgd|adam]`.
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

EXAMPLES = 10_000
LEARNING_RATE = 0.001  # the trainer's default
CALL = 1000  # steps per tf.function call


def _shapes(model: str, hidden: int) -> list[list[int]]:
    """Variable shapes of the trainer's models (tfjob_trainer.model.builtin_models.build_model)."""
    if model == "mlp":
        return [[784, hidden], [hidden], [hidden, 10], [10]]
    return [[3, 3, 1, 32], [32], [3, 3, 32, 64], [64], [1600, 128], [128], [128, 10], [10]]


def _forward(model: str, w: list[tf.Variable], x: tf.Tensor) -> tf.Tensor:
    if model == "mlp":
        return tf.matmul(tf.nn.relu(tf.matmul(x, w[0]) + w[1]), w[2]) + w[3]
    h = tf.reshape(x, [-1, 28, 28, 1])
    for kernel, bias in ((w[0], w[1]), (w[2], w[3])):
        h = tf.nn.relu(tf.nn.conv2d(h, kernel, 1, "VALID") + bias)
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
    h = tf.nn.relu(tf.matmul(tf.reshape(h, [-1, 1600]), w[4]) + w[5])
    return tf.matmul(h, w[6]) + w[7]


def raw(model: str, hidden: int, batch: int, steps: int, optimizer: str = "sgd") -> float:
    x = tf.random.uniform([EXAMPLES, 784])
    y = tf.random.uniform([EXAMPLES], 0, 10, tf.int32)
    weights = [tf.Variable(tf.random.normal(s, stddev=0.05)) for s in _shapes(model, hidden)]
    slots = [(tf.Variable(tf.zeros_like(v)), tf.Variable(tf.zeros_like(v))) for v in weights]
    t = tf.Variable(0.0)

    def update(grads: list[tf.Tensor]) -> None:
        if optimizer == "sgd":
            for v, g in zip(weights, grads, strict=True):
                tf.raw_ops.ResourceApplyGradientDescent(var=v.handle, alpha=0.01, delta=g)
            return
        t.assign_add(1.0)
        b1, b2 = 0.9, 0.999
        for v, (m, s), g in zip(weights, slots, grads, strict=True):
            tf.raw_ops.ResourceApplyAdam(
                var=v.handle, m=m.handle, v=s.handle, beta1_power=b1**t, beta2_power=b2**t,
                lr=LEARNING_RATE, beta1=b1, beta2=b2, epsilon=1e-7, grad=g,
            )  # fmt: skip

    @tf.function
    def train(n: tf.Tensor) -> tf.Tensor:
        loss = tf.constant(0.0)
        for _ in tf.range(n):
            idx = tf.random.uniform([batch], 0, EXAMPLES, tf.int32)
            xb, yb = tf.gather(x, idx), tf.gather(y, idx)
            with tf.GradientTape() as tape:
                logits = _forward(model, weights, xb)
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb, logits=logits)
                )
            update(tape.gradient(loss, weights))
        return loss

    train(tf.constant(10))
    done, start = 0, time.perf_counter()
    while done < steps:
        n = min(CALL, steps - done)
        loss = train(tf.constant(n))
        done += n
    float(loss)
    return steps * batch / (time.perf_counter() - start)


def fit(model: str, hidden: int, batch: int, steps: int, optimizer: str = "adam") -> float:
    from tfjob_trainer.model.builtin_models import build_model

    x = np.random.default_rng(0).random((EXAMPLES, 784), dtype=np.float32)
    y = np.random.default_rng(1).integers(0, 10, EXAMPLES)
    net = build_model(model, hidden)
    opt = keras.optimizers.Adam(LEARNING_RATE) if optimizer == "adam" else keras.optimizers.SGD()
    net.compile(opt, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    net.fit(x, y, batch_size=batch, epochs=1, verbose=0)  # warm-up: tracing
    epochs = max(1, steps * batch // EXAMPLES)
    start = time.perf_counter()
    net.fit(x, y, batch_size=batch, epochs=epochs, verbose=0)
    return epochs * (EXAMPLES // batch) * batch / (time.perf_counter() - start)


if __name__ == "__main__":
    kind, model = sys.argv[1], sys.argv[2]
    hidden, batch, steps = map(int, sys.argv[3:6])
    optimizer = sys.argv[6] if len(sys.argv) > 6 else {"raw": "sgd", "fit": "adam"}[kind]
    rate = {"raw": raw, "fit": fit}[kind](model, hidden, batch, steps, optimizer)
    print(f"examples/s {rate:.0f}")
