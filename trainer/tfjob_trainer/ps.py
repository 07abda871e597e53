"""Asynchronous training with parameter servers: ParameterServerStrategy and ClusterCoordinator.

ps and worker tasks only serve (`tf.distribute.Server(...).join()`); the chief is the
coordinator that creates the variables on the parameter servers and schedules training
closures on the workers. Each closure runs several steps, so that what a closure costs the
coordinator (scheduling it, fetching its result) is paid once for all of them. A lost worker's
closure is re-run elsewhere (at-least-once); a lost parameter server fails the chief, and its
restart resumes from the checkpoint.
"""

from __future__ import annotations

import logging
import socket
import time
from typing import Any

import tensorflow as tf

from tfjob_protocol.result import Result

from . import TaskFailed, inputs, keras_export, result, summaries, threads
from .checkpoints import Checkpoints
from .config import Task
from .data import Files
from .model import build_model, build_optimizer
from .options import Options
from .progress import Progress
from .serving import serve_until_stopped
from .steps import make_step_fn, test_accuracy

log = logging.getLogger(__name__)
_HELD: list[Any] = []  # the coordinator's objects, alive until the process exits


def run(opts: Options, files: Files | None, task: Task | None) -> Result | None:
    """Serve (ps and worker tasks) or coordinate the training (the chief)."""
    assert task is not None, "parameter-server needs a cluster (TF_CONFIG)"
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if task.type in ("ps", "worker"):
        server = tf.distribute.Server(
            resolver.cluster_spec(),
            job_name=task.type,
            task_index=task.index,
            protocol="grpc",
            config=threads.server_config(),
            start=True,
        )
        log.info("%s %d serving on %s", task.type, task.index, server.target)
        serve_until_stopped(server)
        return None
    assert files is not None
    _wait_listening(task, opts.peer_timeout)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    io_device = f"/job:{task.type}/replica:0/task:{task.index}/device:CPU:0"
    try:
        return coordinate(opts, files, strategy, coordinator, io_device)
    except PEER_LOST as e:
        # The variables live on the parameter servers: without one, the chief cannot go on.
        # Not the program's verdict but the cluster's: a restart resumes from the checkpoint.
        first = e.message.splitlines()[0] if e.message else type(e).__name__
        peer = "a parameter server" if from_ps(e) else "a peer"
        raise TaskFailed(f"the connection to {peer} failed ({first})") from e


# How a lost peer (or its connection) surfaces on the chief.
PEER_LOST = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError)


def from_ps(error: tf.errors.OpError) -> bool:
    """Whether a parameter server is the peer that failed: gRPC names the remote task it
    called in the message, as TensorFlow's own coordinator reads it."""
    return "remote target /job:ps" in str(error)


def fetch_report(remote: Any) -> tuple[float, float] | None:
    """A closure's (loss, accuracy), or None when the worker that holds them is gone.

    A closure's outputs stay on its worker until fetched: a worker lost between the end of
    the closure and the fetch takes them along. The steps it ran are on the parameter
    servers already, so only this report is lost; the coordinator re-runs what the worker
    had not finished elsewhere. A lost parameter server still fails the chief."""
    try:
        loss, acc = remote.fetch()
    except PEER_LOST as e:
        if from_ps(e):
            raise
        first = e.message.splitlines()[0] if e.message else type(e).__name__
        log.warning(
            "a worker was lost before its progress was fetched (%s); training goes on", first
        )
        return None
    return float(loss), float(acc)


SAVE_TRIES = 3


def save_checkpoint(ckpts: Checkpoints) -> str:
    """Save, trying again after a connection reset: gRPC reconnects, and a reset that was only
    a reset then costs nothing. A server that is really gone fails every try."""
    for attempt in range(1, SAVE_TRIES + 1):
        try:
            return ckpts.save()
        except tf.errors.UnavailableError as e:
            if attempt == SAVE_TRIES:
                raise
            log.warning("checkpoint save failed (%s); trying again", e.message.splitlines()[0])
            time.sleep(attempt)
    raise AssertionError("unreachable")


def _wait_listening(task: Task, timeout: float) -> None:
    """The coordinator starts when every server accepts connections, not a moment before."""
    pending = {a for t in ("ps", "worker") for a in task.cluster.get(t, [])}
    deadline = time.monotonic() + timeout
    while pending:
        for address in sorted(pending):
            host, _, port = address.rpartition(":")
            try:
                with socket.create_connection((host, int(port)), timeout=1):
                    pending.discard(address)
            except OSError:
                pass
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"servers not listening after {timeout:.0f}s: {sorted(pending)}")
        if pending:
            time.sleep(0.2)


def coordinate(
    opts: Options,
    files: Files,
    strategy: tf.distribute.ParameterServerStrategy,
    coordinator: tf.distribute.coordinator.ClusterCoordinator,
    io_device: str | None = None,
) -> Result:
    """Train as the coordinator; checkpoints are read and written on `io_device` (the
    coordinator's own CPU), so the parameter servers need no access to the directory."""
    with strategy.scope():
        model = build_model(opts.model, opts.hidden_units)
        optimizer = build_optimizer(opts, model)
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
    ckpts = Checkpoints(opts.checkpoint_dir, step, model, optimizer, io_device=io_device)
    start_step = ckpts.restore()

    def per_worker_dataset() -> tf.data.Dataset:
        # Runs on each worker, reading that worker's copy of the record files; no fixed seed,
        # so workers see different batches.
        return inputs.train_dataset(files, opts.batch_size, seed=None)

    iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset))
    step_fn = make_step_fn(model, optimizer, opts.batch_size)

    @tf.function
    def train_steps(it: Any, n: int) -> tuple[tf.Tensor, tf.Tensor]:
        for _ in tf.range(n - 1):
            strategy.run(step_fn, args=next(it))
        loss, acc = strategy.run(step_fn, args=next(it))
        step.assign_add(n)  # one write to the parameter server per closure, not per step
        return loss, acc

    progress = Progress(
        summaries.writer(opts),
        opts.batch_size,
        start_step,
        details=summaries.details(opts, files),
        weights=lambda: model.trainable_variables,
    )
    scheduled = start_step
    loss = acc = 0.0
    started = time.perf_counter()
    while scheduled < opts.steps:
        n = min(opts.per_call(one_device=False), opts.steps - scheduled)
        remote = coordinator.schedule(train_steps, args=(iterator, n))
        before, scheduled = scheduled, scheduled + n
        if scheduled // opts.log_every > before // opts.log_every or scheduled >= opts.steps:
            fetched = fetch_report(remote)
            if fetched is not None:
                loss, acc = fetched
                progress.report(int(step.numpy()), loss, acc)
        if scheduled // opts.checkpoint_every > before // opts.checkpoint_every:
            coordinator.join()
            save_checkpoint(ckpts)
    coordinator.join()
    elapsed = time.perf_counter() - started
    final = int(step.numpy())
    if final != start_step or not ckpts.manager.latest_checkpoint:
        save_checkpoint(ckpts)
    if start_step >= opts.steps:
        log.info("already trained to step %d; nothing to do", start_step)
    trained = final - start_step
    # Freeing the per-worker iterators and functions sends remote deletes that can take
    # seconds; the process exits right after the result line, so keep them until then.
    _HELD.extend([iterator, train_steps, model, optimizer, ckpts])
    return result.trained(
        "parameter-server",
        steps=final,
        trained_steps=trained,
        examples_per_step=opts.batch_size,
        elapsed=elapsed,
        loss=loss,
        train_accuracy=acc,
        test_accuracy=test_accuracy(model, files),
        examples_per_sec=progress.steady_examples_per_sec(),
        first_step_sec=progress.first_step_at,
        checkpoint=ckpts.latest,
        export=str(keras_export.save(model, opts.export_dir)),
    )
