"""What every TF2 strategy shares: model, input pipeline, train step, checkpoints, summaries,
the throughput log line and the final result line."""

from __future__ import annotations

import json
import logging
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from . import STARTED
from .data import IMAGE_BYTES, Files, read_test
from .options import Options
from .summaries import Details, sample_images

log = logging.getLogger(__name__)

RESULT_PREFIX = "TFJOB_RESULT "


def build_model(kind: str, hidden_units: int = 500) -> keras.Model:
    """mlp: 784-500-10 as in the classic recipes; cnn: two conv blocks."""
    if kind == "mlp":
        layers = [keras.layers.Dense(hidden_units, activation="relu"), keras.layers.Dense(10)]
    else:
        layers = [
            keras.layers.Reshape((28, 28, 1)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10),
        ]
    return keras.Sequential([keras.Input((IMAGE_BYTES,)), *layers], name=f"mnist_{kind}")


def build_optimizer(opts: Options, model: keras.Model) -> keras.optimizers.Optimizer:
    optimizer = keras.optimizers.Adam(opts.learning_rate)
    optimizer.build(model.trainable_variables)  # slots exist before a checkpoint restores them
    return optimizer


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
    single process 20-30% of the leanest loop's throughput on the MLP (measured), and without
    it the whole loop of steps compiles into one XLA computation. A step's batch is drawn at
    random from the whole training set, seeded by the step's number: the batches depend on
    the step alone, so a run restarted from a checkpoint sees the batches it would have seen.
    (Epochs of a shuffled order cost 15% more on the MLP, to carry the order through the loop.)
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


def per_example_loss(labels: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


def make_step_fn(model: keras.Model, optimizer: keras.optimizers.Optimizer, global_batch: int):
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
    x, y = read_test(files)
    correct = 0
    for i in range(0, len(x), batch):
        logits = model(x[i : i + batch].astype(np.float32) / 255.0, training=False)
        correct += int(np.sum(np.argmax(np.asarray(logits), axis=1) == y[i : i + batch]))
    return correct / len(x)


class Checkpoints:
    """The step counter, model and optimizer, in a CheckpointManager directory.

    `io_device` names the one task that reads and writes the files. Without it, TensorFlow
    saves each variable's shard from the task that holds it: under parameter servers, the ps
    tasks, which have no checkpoint volume (a TFJob mounts it everywhere but on them).
    """

    def __init__(
        self,
        directory: Path,
        step: tf.Variable,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        max_to_keep: int = 3,
        io_device: str | None = None,
    ) -> None:
        self.options = tf.train.CheckpointOptions(experimental_io_device=io_device)
        self.checkpoint = tf.train.Checkpoint(step=step, model=model, optimizer=optimizer)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(directory), max_to_keep=max_to_keep
        )
        self.step = step

    def restore(self, latest: str | None = None) -> int:
        """Restore the newest checkpoint; return the step to continue from."""
        path = latest or self.manager.latest_checkpoint
        if path:
            self.checkpoint.restore(path, options=self.options).expect_partial()
            log.info("restored %s at step %d", path, int(self.step.numpy()))
        return int(self.step.numpy())

    def save(self) -> str:
        """Save at the current step; the log line names the checkpoint, for whoever follows
        the job from its logs (a restart's `restored` line names one of these)."""
        step = int(self.step.numpy())
        path = self.manager.save(checkpoint_number=step, options=self.options)
        log.info("saved %s at step %d", path, step)
        return path


@dataclass
class Progress:
    """The chief's log lines and TensorBoard scalars, in the classic recipes' format."""

    writer: Any
    global_batch: int
    start_step: int
    last_step: int = 0
    last_time: float = field(default_factory=time.perf_counter)
    started: float = STARTED  # time to first step counts from the process's start
    first_step_at: float | None = None
    examples_per_sec: float = 0.0
    first_report: tuple[int, float] | None = None
    # Histograms of these weights and a few input images, at `details`' interval.
    details: Details | None = None
    weights: Callable[[], Iterable[Any]] | None = None

    def steady_examples_per_sec(self) -> float | None:
        """Throughput after the first report: without start-up, tracing and compilation."""
        if self.first_report is None or self.last_step <= self.first_report[0]:
            return None
        step, at = self.first_report
        return (self.last_step - step) * self.global_batch / (self.last_time - at)

    def report(self, step: int, loss: float, accuracy: float) -> None:
        now = time.perf_counter()
        if self.first_step_at is None:
            self.first_step_at = now - self.started
            self.first_report = (step, now)
        steps = max(step - self.last_step, 1)
        elapsed = max(now - self.last_time, 1e-9)
        if self.last_step:
            self.examples_per_sec = steps * self.global_batch / elapsed
            print(
                f"step {step}, loss = {loss:.2f} ({self.examples_per_sec:.1f} examples/sec; "
                f"{elapsed / steps:.3f} sec/batch)",
                flush=True,
            )
            if self.writer is not None:
                with self.writer.as_default(step=step):
                    tf.summary.scalar("examples_per_sec", self.examples_per_sec)
        else:
            print(f"step {step}, loss = {loss:.2f}", flush=True)
        if self.writer is not None:
            with self.writer.as_default(step=step):
                tf.summary.scalar("loss", loss)
                tf.summary.scalar("accuracy", accuracy)
            self.writer.flush()
            if self.details is not None and self.weights is not None:
                self.details.write(self.writer, step, self.weights())
        self.last_step, self.last_time = step, now


def summary_writer(opts: Options, name: str = "train") -> Any:
    return tf.summary.create_file_writer(str(opts.log_dir / name))


def details(opts: Options, files: Files) -> Details:
    """Weight histograms every --histogram-every steps, and a few input images, once."""
    return Details(opts.histogram_every, sample_images(files))


def export(model: keras.Model, export_dir: Path) -> Path:
    export_dir.mkdir(parents=True, exist_ok=True)
    path = export_dir / "model.keras"
    model.save(path)
    return path


def result(**fields: Any) -> None:
    """The one machine-readable line a run ends with (with this process's peak RSS and CPU
    seconds, which tell a benchmark where a job's cores went)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    own = {
        "peak_rss_mib": round(usage.ru_maxrss / 1024),
        "cpu_sec": round(usage.ru_utime + usage.ru_stime, 2),
    }
    print(RESULT_PREFIX + json.dumps({**fields, **own}, sort_keys=True), flush=True)
