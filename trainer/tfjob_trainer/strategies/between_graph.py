"""Between-graph replication, the classic TF1 recipe, through `tf.compat.v1` in graph mode.

Every task runs a `tf.compat.v1.train.Server`; ps tasks only serve. Each worker (and the chief,
if the cluster has one) builds its own copy of the graph, with the variables placed on the ps
tasks by `replica_device_setter`, and runs its own training loop fed from numpy. Updates are
asynchronous (each worker applies its gradients as they come), or with `--sync` aggregated by
`SyncReplicasOptimizer`. The chief initializes or restores the variables, saves TF1 checkpoints
(written by the chief itself, so only the chief needs the checkpoint volume), logs and writes
TensorBoard scalars. At the end it measures test accuracy with the graph and exports the weights
as `<export-dir>/weights.npz`, in the order
`model.builtin_models.build_model(kind).set_weights` takes.
Keras 3 does not run in graph mode and eager cannot come back once disabled, so a fresh process
(`output/keras_export.py`) turns those weights into `<export-dir>/model.keras`, as the other modes
export.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow.compat.v1 as v1  # a module, not a variable: its classes serve as types

from tfjob_protocol.result import Result

from .. import STARTED
from ..config import TRAINER_TYPES, Task
from ..data.mnist import IMAGE_BYTES, Files, read_test
from ..options import Options
from ..output import keras_export, summaries, task_result
from ..output.progress_log import Progress
from ..runtime import threads
from ..runtime.serving import serve_until_stopped
from ..runtime.stopping import STOP, leave, wait_for_chief

log = logging.getLogger(__name__)

WEIGHTS_FILE = "weights.npz"
SESSION_POLL_SECS = 1  # non-chief workers: how often to check that the chief is ready
TEST_BATCH = 2000


def run(opts: Options, files: Files | None, task: Task | None) -> Result | None:
    """Serve (ps: forever) or train this worker's replica; return the worker's result."""
    assert task is not None, "between-graph needs a cluster (TF_CONFIG)"
    v1.disable_eager_execution()
    cluster = tf.train.ClusterSpec(task.cluster)
    server = v1.train.Server(
        cluster, job_name=task.type, task_index=task.index, config=threads.server_config()
    )
    if task.type == "ps":
        log.info("ps %d serving on %s", task.index, server.target)
        serve_until_stopped(server, task.chief_address)  # the chief saves from it first
        return None
    if task.type not in TRAINER_TYPES:
        raise ValueError(f"between-graph has no part for a {task.type} task")
    assert files is not None
    return train(opts, files, task, cluster, server.target)


def build_model(
    kind: str, x: tf.Tensor, hidden_units: int = 500
) -> tuple[tf.Tensor, list[tf.Variable]]:
    """Logits and the weights in Keras `get_weights` order, so the export loads into
    `model.builtin_models.build_model(kind, hidden_units)` (Keras 3 itself does not run in
    graph mode)."""
    weights: list[tf.Variable] = []
    glorot = v1.glorot_uniform_initializer()

    def var(name: str, shape: list[int]) -> tf.Variable:
        init = glorot if name.endswith("kernel") else v1.zeros_initializer()
        weights.append(v1.get_variable(name, shape, initializer=init))
        return weights[-1]

    def dense(h: tf.Tensor, name: str, units: int, relu: bool) -> tf.Tensor:
        h = tf.matmul(h, var(f"{name}/kernel", [int(h.shape[-1]), units]))
        h = tf.nn.bias_add(h, var(f"{name}/bias", [units]))
        return tf.nn.relu(h) if relu else h

    def conv(h: tf.Tensor, name: str, filters: int) -> tf.Tensor:
        kernel = var(f"{name}/kernel", [3, 3, int(h.shape[-1]), filters])
        h = tf.nn.conv2d(h, kernel, strides=1, padding="VALID")
        h = tf.nn.relu(tf.nn.bias_add(h, var(f"{name}/bias", [filters])))
        return tf.nn.max_pool2d(h, ksize=2, strides=2, padding="VALID")

    if kind == "mlp":
        return dense(dense(x, "dense", hidden_units, True), "dense_1", 10, False), weights
    if kind != "cnn":
        raise ValueError(f"unknown model {kind!r}")
    h = conv(conv(tf.reshape(x, [-1, 28, 28, 1]), "conv2d", 32), "conv2d_1", 64)
    h = tf.reshape(h, [-1, int(np.prod(h.shape[1:]))])  # NHWC order, as Keras Flatten
    return dense(dense(h, "dense", 128, True), "dense_1", 10, False), weights


def batches(files: Files, batch_size: int, seed: list[int]) -> Iterator[tuple[np.ndarray, ...]]:
    """This worker's own endless shuffled stream of (images in [0, 1], labels)."""
    x = np.frombuffer(files.train_images.read_bytes(), dtype=np.uint8).reshape(-1, IMAGE_BYTES)
    y = np.frombuffer(files.train_labels.read_bytes(), dtype=np.uint8).astype(np.int32)
    if len(x) < batch_size:
        raise ValueError(f"--batch-size {batch_size} exceeds the {len(x)} training examples")
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(x))
        for i in range(0, len(order) - batch_size + 1, batch_size):
            idx = order[i : i + batch_size]
            yield x[idx].astype(np.float32) / 255.0, y[idx]


# TensorFlow's classes are Any to mypy (it has no annotations): the hooks below subclass them.
class _PollingWorkerSessionCreator(v1.train.WorkerSessionCreator):  # type: ignore[misc]
    """A worker's session creator that checks for the chief's initialization every second:
    the stock one waits 30 s between checks, which is most of a short job."""

    _session_manager: v1.train.SessionManager | None  # the base class's, made lazily

    def _get_session_manager(self) -> v1.train.SessionManager:
        if self._session_manager is None:
            self._session_manager = v1.train.SessionManager(
                local_init_op=self._scaffold.local_init_op,
                local_init_feed_dict=self._scaffold.local_init_feed_dict,
                ready_op=self._scaffold.ready_op,
                ready_for_local_init_op=self._scaffold.ready_for_local_init_op,
                graph=v1.get_default_graph(),
                recovery_wait_secs=SESSION_POLL_SECS,
            )
        return self._session_manager


class _SyncChiefHook(v1.train.SessionRunHook):  # type: ignore[misc]
    """Sync mode, chief: what `SyncReplicasOptimizer.make_session_run_hook(True)` does, plus a
    clean end. The chief's queue runner always ends blocked in `take_grad`, waiting for a round
    of gradients that never comes; the stock hook's runner then holds up the session close for
    the whole grace period and prints a traceback when the close cancels it. This one counts
    the cancellation as the end. And a worker whose last gradient came too late (stale, or one
    past the final update) waits in the token dequeue for an update that never comes: at the
    end the chief leaves one token per other replica, so each finishes its step and stops."""

    def __init__(self, optimizer: v1.train.SyncReplicasOptimizer, replicas: int) -> None:
        stock = optimizer.get_chief_queue_runner()
        self._runner = v1.train.QueueRunner(
            queue=stock.queue,
            enqueue_ops=stock.enqueue_ops,
            close_op=stock.close_op,
            cancel_op=stock.cancel_op,
            queue_closed_exception_types=(tf.errors.OutOfRangeError, tf.errors.CancelledError),
        )
        self._ready_op = optimizer.ready_for_local_init_op
        self._init_ops = [optimizer.chief_init_op, optimizer.get_init_tokens_op()]
        self._release_op = (
            optimizer.get_init_tokens_op(num_tokens=replicas - 1) if replicas > 1 else None
        )

    def after_create_session(self, session: v1.Session, coord: tf.train.Coordinator) -> None:
        missing = session.run(self._ready_op)
        if len(missing):
            raise RuntimeError(f"variables not initialized for the sync init: {missing}")
        for op in self._init_ops:
            session.run(op)
        self._runner.create_threads(session, coord=coord, daemon=True, start=True)

    def end(self, session: v1.Session) -> None:
        if self._release_op is not None:
            session.run(self._release_op)


class _ExportHook(v1.train.SessionRunHook):  # type: ignore[misc]
    """Chief: before the session closes, score the test set and export the weights. The first
    batch of the test set and the weights come from one `run`, so in async mode (where other
    workers may still land an update) the export is the model that was scored."""

    def __init__(self, files: Files, graph: _Graph, export_dir: Path) -> None:
        self.files, self.graph, self.export_dir = files, graph, export_dir
        self.path: Path | None = None
        self.test_accuracy: float | None = None

    def end(self, session: v1.Session) -> None:
        if STOP.requested:
            return  # a stop: the checkpoint saver's `end` saves; the restart exports
        x_test, y_test = read_test(self.files)
        g, correct, values = self.graph, 0, []
        for i in range(0, len(x_test), TEST_BATCH):
            feed = {g.images: x_test[i : i + TEST_BATCH] / np.float32(255.0)}
            if i == 0:
                logits, values = session.run([g.logits, g.weights], feed)
            else:
                logits = session.run(g.logits, feed)
            correct += int(np.sum(np.argmax(logits, axis=1) == y_test[i : i + TEST_BATCH]))
        self.test_accuracy = correct / len(x_test)
        self.export_dir.mkdir(parents=True, exist_ok=True)
        arrays = {
            f"{i:02d}_{w.op.name.replace('/', '_')}": v
            for i, (w, v) in enumerate(zip(g.weights, values, strict=True))
        }
        fd, tmp = tempfile.mkstemp(dir=self.export_dir, prefix=f".{WEIGHTS_FILE}.", suffix=".npz")
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **arrays)
        self.path = self.export_dir / WEIGHTS_FILE
        os.replace(tmp, self.path)  # readers never see half a file


def _to_keras(weights: Path, opts: Options) -> Path:
    """The `.keras` model from the exported weights, built in a fresh (eager) process."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tfjob_trainer.output.keras_export",
            str(weights),
            opts.model,
            str(opts.hidden_units),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return weights.with_name(keras_export.FILE)


@dataclass
class _Graph:
    """This replica's graph: what the loop feeds and fetches, and the hooks it needs."""

    images: tf.Tensor
    labels: tf.Tensor
    logits: tf.Tensor
    weights: list[tf.Variable]
    global_step: tf.Variable
    loss: tf.Tensor
    accuracy: tf.Tensor
    step_after: tf.Tensor  # the global step once this replica's update is in
    hooks: list[v1.train.SessionRunHook]
    saver: v1.train.Saver


def build_graph(
    opts: Options, cluster: tf.train.ClusterSpec, worker_device: str, replicas: int, is_chief: bool
) -> _Graph:
    """Variables on the ps tasks (round-robin), computation on this worker."""
    setter = v1.train.replica_device_setter(worker_device=worker_device, cluster=cluster)
    with v1.device(setter):
        global_step = v1.train.get_or_create_global_step()
        images = v1.placeholder(tf.float32, [None, IMAGE_BYTES], name="images")
        labels = v1.placeholder(tf.int32, [None], name="labels")
        logits, weights = build_model(opts.model, images, opts.hidden_units)
        loss = tf.reduce_mean(
            tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        )
        predicted = tf.argmax(logits, 1, output_type=tf.int32)
        accuracy = tf.reduce_mean(tf.cast(tf.equal(predicted, labels), tf.float32))
        optimizer = v1.train.AdamOptimizer(opts.learning_rate)
        hooks: list[v1.train.SessionRunHook] = [v1.train.StopAtStepHook(last_step=opts.steps)]
        if opts.sync:
            optimizer = v1.train.SyncReplicasOptimizer(
                optimizer, replicas_to_aggregate=replicas, total_num_replicas=replicas
            )
        train_op = optimizer.minimize(loss, global_step=global_step)
        if opts.sync:
            hooks.append(
                _SyncChiefHook(optimizer, replicas)
                if is_chief
                else optimizer.make_session_run_hook(False)
            )
        with tf.control_dependencies([train_op]):
            step_after = tf.identity(global_step)
    with v1.device(worker_device):
        # Not sharded: the chief writes the whole checkpoint, so ps pods need no volume.
        saver = v1.train.Saver(sharded=False, max_to_keep=3)
    return _Graph(
        images, labels, logits, weights, global_step, loss, accuracy, step_after, hooks, saver
    )


def open_session(
    opts: Options,
    graph: _Graph,
    target: str,
    worker_device: str,
    export: _ExportHook | None,
) -> v1.train.MonitoredSession:
    """The chief's session initializes or restores and saves; a worker's waits for that."""
    scaffold = v1.train.Scaffold(saver=graph.saver)
    # Each worker talks to the ps tasks only: no waiting for, or failing with, other workers.
    config = v1.ConfigProto(device_filters=["/job:ps", worker_device])
    if export is None:
        creator = _PollingWorkerSessionCreator(scaffold=scaffold, master=target, config=config)
        return v1.train.MonitoredSession(
            session_creator=creator, hooks=graph.hooks, stop_grace_period_secs=1
        )
    return v1.train.MonitoredTrainingSession(
        master=target,
        is_chief=True,
        checkpoint_dir=str(opts.checkpoint_dir),
        scaffold=scaffold,
        hooks=graph.hooks,
        chief_only_hooks=[export],
        save_checkpoint_steps=opts.checkpoint_every,
        save_checkpoint_secs=None,
        save_summaries_steps=None,  # the loop writes the scalars
        save_summaries_secs=None,
        summary_dir=str(opts.log_dir / "train"),
        log_step_count_steps=None,  # its global_step/sec warns on every sync round
        config=config,
        # Only the sync queue runner can outlive training, blocked until the close cancels it.
        stop_grace_period_secs=1,
    )


def train(
    opts: Options, files: Files, task: Task, cluster: tf.train.ClusterSpec, target: str
) -> Result:
    """Train this replica until the global step reaches --steps; the chief also restores,
    saves, logs, scores and exports."""
    replicas, rank = task.trainers, task.rank  # the rank seeds this replica's batches
    worker_device = f"/job:{task.type}/task:{task.index}"
    # In sync mode one global step aggregates every replica's batch; async, one batch.
    examples_per_step = opts.batch_size * (len(replicas) if opts.sync else 1)
    g = build_graph(opts, cluster, worker_device, len(replicas), task.is_chief)
    export = _ExportHook(files, g, opts.export_dir) if task.is_chief else None
    writer = v1.summary.FileWriterCache.get(str(opts.log_dir / "train")) if export else None
    progress = Progress(
        None, examples_per_step, 0, metrics_file=opts.metrics_file if export else None
    )
    details = summaries.details(opts, files) if export else None
    local_steps, loss, accuracy, first_step_sec = 0, 0.0, 0.0, None
    # The chief resumes from its checkpoint; by the time it reads the global step, other
    # workers may already have moved it on.
    restored = tf.train.latest_checkpoint(str(opts.checkpoint_dir)) if export else None
    with open_session(opts, g, target, worker_device, export) as sess:
        # Read past the hooks: StopAtStepHook would take this read for a training step.
        current = int(
            sess.run_step_fn(lambda step_context: step_context.session.run(g.global_step))
        )
        start = _step_of(restored) if restored else current
        log.info(
            "%s %d: replica %d of %d, starting at global step %d",
            task.type,
            task.index,
            rank + 1,
            len(replicas),
            start,
        )
        if start >= opts.steps:
            log.info("already trained to step %d; nothing to do", start)
        data = batches(files, opts.batch_size, seed=[rank, start])
        started = time.perf_counter()
        STOP.defer()  # asked to stop, the loop ends at this step; the chief's session saves it
        while start < opts.steps and not sess.should_stop() and not STOP.requested:
            x, y = next(data)
            fetched = sess.run([g.step_after, g.loss, g.accuracy], {g.images: x, g.labels: y})
            last, current = current, int(fetched[0])
            loss, accuracy = float(fetched[1]), float(fetched[2])
            local_steps += 1
            if first_step_sec is None:
                first_step_sec = time.perf_counter() - STARTED
            # Async, the global step moves under every worker: log on crossing a multiple.
            crossed = current // opts.log_every > last // opts.log_every
            if export and (crossed or current >= opts.steps):
                progress.report(current, loss, {"accuracy": accuracy})
                _write_scalars(
                    writer,
                    current,
                    loss=loss,
                    accuracy=accuracy,
                    examples_per_sec=progress.examples_per_sec or None,
                )
                if details is not None:
                    details.write_protos(writer, current, lambda: _weights(sess, g))
        elapsed = time.perf_counter() - started
    if STOP.requested:
        stopped(task, opts)
    checkpoint = tf.train.latest_checkpoint(str(opts.checkpoint_dir)) if export else None
    if checkpoint:
        # Async, the chief's loop can end on another worker's update (StopAtStepHook reads the
        # global step after each run): the step its closing checkpoint holds is the job's.
        current = max(current, _step_of(checkpoint))
    return task_result.trained(
        "between-graph-sync" if opts.sync else "between-graph",
        steps=current,
        trained_steps=max(current - start, 0),
        examples_per_step=examples_per_step,
        elapsed=elapsed,
        loss=loss,
        train_accuracy=accuracy,
        test_accuracy=export.test_accuracy if export else None,
        examples_per_sec=progress.steady_examples_per_sec(),
        first_step_sec=first_step_sec,
        checkpoint=checkpoint,
        export=str(_to_keras(export.path, opts)) if export and export.path else None,
        replicas=len(replicas),
        local_steps=local_steps,
    )


def stopped(task: Task, opts: Options) -> None:
    """After a stop on request: the chief's session saved at its close, so it leaves naming
    that step; another worker keeps its server up until the chief is gone (with `--sync`, the
    chief's last step waits for the workers' gradients)."""
    if not task.is_chief:
        wait_for_chief(task.chief_address)
    latest = tf.train.latest_checkpoint(str(opts.checkpoint_dir))
    saved = _step_of(latest) if latest else None
    log.info("stopped at step %s, saved %s; a restart resumes from step %s", saved, latest, saved)
    leave(saved)


def _step_of(checkpoint: str) -> int:
    """The global step a TF1 checkpoint path is named by (`.../model.ckpt-1200`)."""
    return int(checkpoint.rsplit("-", 1)[1])


def _weights(sess: Any, g: _Graph) -> list[tuple[str, Any]]:
    """(tag, value) of each weight, read past the hooks (not a training step)."""
    values = sess.run_step_fn(lambda step_context: step_context.session.run(g.weights))
    return [(summaries.tag(w), v) for w, v in zip(g.weights, values, strict=True)]


def _write_scalars(writer: Any, step: int, **values: float | None) -> None:
    """TensorBoard scalars as Summary protos: tf.summary needs eager, this mode has none."""
    if writer is None:
        return
    summary = v1.Summary(
        value=[
            v1.Summary.Value(tag=tag, simple_value=value)
            for tag, value in values.items()
            if value is not None
        ]
    )
    writer.add_summary(summary, global_step=step)
    writer.flush()
