"""Asynchronous training with parameter servers: ParameterServerStrategy and ClusterCoordinator.

ps and worker tasks only serve (`tf.distribute.Server(...).join()`); the chief is the
coordinator that creates the variables on the parameter servers and schedules training
closures on the workers. Each closure runs several steps, so that what a closure costs the
coordinator (scheduling it, fetching its result) is paid once for all of them. A lost worker's
closure is re-run elsewhere (at-least-once); a lost parameter server fails the chief, and its
restart resumes from the checkpoint.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from typing import Any

import tensorflow as tf

from tfjob_protocol.result import Result

from .. import TaskFailed
from ..config import Task
from ..data import inputs
from ..data.mnist import Files
from ..model import trainable
from ..options import Options
from ..output import keras_export, summaries, task_result
from ..output.checkpoints import Checkpoints
from ..output.progress_log import Progress
from ..runtime import memory, stall, threads
from ..runtime.exit_codes import EXIT_PEER_LOST, exit_now
from ..runtime.serving import serve_until_stopped
from ..runtime.stopping import STOP, leave

log = logging.getLogger(__name__)
_HELD: list[Any] = []  # the coordinator's objects, alive until the process exits


def run(opts: Options, files: Files | None, task: Task | None) -> Result | None:
    """Serve (ps and worker tasks) or coordinate the training (the chief)."""
    assert task is not None, "parameter-server needs a cluster (TF_CONFIG)"
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if task.type in ("ps", "worker"):
        if task.type == "ps":
            memory.write_budget(task.cluster["ps"][task.index].rpartition(":")[2])
        server = tf.distribute.Server(
            resolver.cluster_spec(),
            job_name=task.type,
            task_index=task.index,
            protocol="grpc",
            config=threads.server_config(),
            start=True,
        )
        log.info("%s %d serving on %s", task.type, task.index, server.target)
        # Asked to stop, a parameter server serves on while the chief saves the variables it
        # holds; a worker only while the chief may still wait for its closures.
        linger = None if task.type == "ps" else WORKER_LINGER_SECS
        serve_until_stopped(server, task.chief_address, linger)
        return None
    assert files is not None or not opts.builtin_input
    show_recoveries()
    _wait_listening(task, opts.peer_timeout)
    strategy = connect(resolver)
    check_memory(opts, files, task)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    io_device = f"/job:{task.type}/replica:0/task:{task.index}/device:CPU:0"
    peers = [a for t in ("ps", "worker") for a in task.cluster.get(t, [])]
    watchdog = stall.Watchdog(peers, opts.stall_timeout, _stalled) if opts.stall_timeout else None
    try:
        return coordinate(opts, files, strategy, coordinator, io_device, watchdog)
    except PEER_LOST as e:
        # The variables live on the parameter servers: without one, the chief cannot go on.
        # Not the program's verdict but the cluster's: a restart resumes from the checkpoint.
        first = e.message.splitlines()[0] if e.message else type(e).__name__
        peer = "a parameter server" if from_ps(e) else "a peer"
        raise TaskFailed(f"the connection to {peer} failed ({first})") from e


# What TensorFlow's coordinator says, at INFO, once a lost worker serves again and gets closures.
RECOVERED = "Worker %s has been recovered."


class _Recoveries(logging.Filter):
    """TensorFlow's errors, and its word that a lost worker is back: the chief's log then shows
    both ends of a worker's loss, not only the failure."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or record.msg == RECOVERED


def show_recoveries() -> None:
    """Let the coordinator's recovery lines through TensorFlow's logger, which shows only
    errors otherwise (`__main__`)."""
    tf_log = logging.getLogger("tensorflow")
    if not any(isinstance(f, _Recoveries) for f in tf_log.filters):
        tf_log.addFilter(_Recoveries())
    tf_log.setLevel(logging.INFO)


def connect(resolver: Any) -> Any:
    """The strategy, whose start sends each server the chief's context. A CreateContext that
    timed out on a slow server and was sent again finds its own first try there ("already
    exists"): the cluster's hiccup, not the program's, so the task fails as for a lost peer
    and a restart, with a new context, connects."""
    try:
        return tf.distribute.ParameterServerStrategy(resolver)
    except tf.errors.InvalidArgumentError as e:
        message = e.message or ""
        if "CreateContext" not in message or "already exists" not in message:
            raise
        first = next((line for line in message.splitlines() if "already exists" in line), "")
        raise TaskFailed(f"connecting to the cluster failed ({first.strip()})") from e


def _stalled(message: str) -> None:
    log.error("chief %s", message)
    exit_now(EXIT_PEER_LOST)


def check_memory(opts: Options, files: Files | None, task: Task) -> None:
    """Before any variable goes to a parameter server: do they fit? A copy of the model is
    built here, on the chief, only when a PS has a memory limit to compare with."""
    addresses = task.cluster.get("ps", [])
    budgets = memory.read_budgets(addresses)
    if not budgets:
        return
    probe = trainable.prepare(opts, files)
    sizes, names = memory.variable_bytes(probe.model, probe.optimizer)
    memory.check(sizes, names, budgets, len(addresses), str(probe.plugin))


# How a lost peer (or its connection) surfaces on the chief.
PEER_LOST = (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError)


def from_ps(error: tf.errors.OpError) -> bool:
    """Whether a parameter server is the peer that failed: gRPC names the remote task it
    called in the message, as TensorFlow's own coordinator reads it."""
    return "remote target /job:ps" in str(error)


def fetch_report(remote: Any) -> tuple[float, tuple[float, ...]] | None:
    """A closure's (loss, metrics), or None when the worker that holds them is gone.

    A closure's outputs stay on its worker until fetched: a worker lost between the end of
    the closure and the fetch takes them along. The steps it ran are on the parameter
    servers already, so only this report is lost; the coordinator re-runs what the worker
    had not finished elsewhere. A lost parameter server still fails the chief."""
    try:
        loss, metrics = remote.fetch()
    except PEER_LOST as e:
        if from_ps(e):
            raise
        first = e.message.splitlines()[0] if e.message else type(e).__name__
        log.warning(
            "a worker was lost before its progress was fetched (%s); training goes on", first
        )
        return None
    return float(loss), tuple(float(m) for m in metrics)


def settle(step: tf.Variable, scheduled: int) -> int:
    """The step counter once every closure has run: the steps scheduled, each once.

    A closure whose worker was lost after it ran, but before its result reached the
    coordinator, runs again on another worker: its steps are trained twice (more updates, as
    asynchronous training allows) and counted twice on the parameter server. The job's step is
    the schedule's, so that it ends at its exact target and checkpoints are named by it.
    """
    counted = int(step.numpy())
    if counted != scheduled:
        log.info("step counter at %d after re-run closures; the schedule's step is %d",
                 counted, scheduled)  # fmt: skip
        step.assign(scheduled)
    return scheduled


SAVE_TRIES = 3
# A worker asked to stop serves this long (unless its chief is gone first): every pod of a
# preempted job gets SIGTERM at once, and the chief lets the closures in flight finish
# (FINISH_SECS) before it saves. A worker stopped alone (its node drained) leaves after it,
# and the chief runs its closures elsewhere.
WORKER_LINGER_SECS = 10.0
FINISH_SECS = 5.0


def stop_and_save(
    coordinator: tf.distribute.coordinator.ClusterCoordinator,
    step: tf.Variable,
    scheduled: int,
    ckpts: Checkpoints,
) -> None:
    """A stop on request: nothing more is scheduled; the closures in flight finish if their
    workers are still there (within FINISH_SECS), then the step they count is saved from the
    parameter servers and the chief leaves. A closure that did not finish is not counted (its
    updates, partly applied, are trained again after the restart, as a re-run closure's are),
    so the step saved is the step the variables hold."""
    deadline = time.monotonic() + FINISH_SECS
    finished = False
    with contextlib.suppress(*PEER_LOST):
        while not (finished := coordinator.done()) and time.monotonic() < deadline:
            time.sleep(0.05)
    if finished:
        settle(step, scheduled)
    elif int(step.numpy()) > scheduled:
        step.assign(scheduled)
    final = int(step.numpy())
    save_checkpoint(ckpts)
    log.info("stopped at step %d, saved %s; a restart resumes from step %d",
             final, ckpts.latest, final)  # fmt: skip
    leave(final)


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
    files: Files | None,
    strategy: tf.distribute.ParameterServerStrategy,
    coordinator: tf.distribute.coordinator.ClusterCoordinator,
    io_device: str | None = None,
    watchdog: stall.Watchdog | None = None,
) -> Result:
    """Train as the coordinator; checkpoints are read and written on `io_device` (the
    coordinator's own CPU), so the parameter servers need no access to the directory."""
    with strategy.scope():
        t = trainable.prepare(opts, files)
        step = tf.Variable(0, dtype=tf.int64, trainable=False)
    model, optimizer = t.model, t.optimizer
    ckpts = Checkpoints(
        opts.checkpoint_dir, step, model, optimizer, io_device=io_device, writer=True
    )
    start_step = ckpts.restore()
    per_worker = per_worker_dataset(opts, files, strategy)
    iterator = iter(coordinator.create_per_worker_dataset(per_worker))
    step_fn = trainable.make_step_fn(t)
    train_steps = closure_function(strategy, step_fn, step)
    progress = Progress(
        summaries.writer(opts),
        opts.batch_size,
        start_step,
        details=summaries.details(opts, files),
        weights=lambda: model.trainable_variables,
        metrics_file=opts.metrics_file,
    )
    scheduled, loss, metrics, elapsed = schedule_steps(
        opts, coordinator, train_steps, iterator, t, step, ckpts, progress, start_step, watchdog
    )
    if scheduled < opts.steps:  # stopped on request
        stop_and_save(coordinator, step, scheduled, ckpts)
    final = settle(step, scheduled)
    if not ckpts.latest.endswith(f"-{final}"):  # not saved at this step by the loop
        save_checkpoint(ckpts)
    if start_step >= opts.steps:
        log.info("already trained to step %d; nothing to do", start_step)
    trained = final - start_step
    # Freeing the per-worker iterators and functions sends remote deletes that can take
    # seconds; the process exits right after the result line, so keep them until then.
    _HELD.extend([iterator, train_steps, model, optimizer, ckpts])
    return task_result.trained(
        "parameter-server",
        steps=final,
        trained_steps=trained,
        examples_per_step=opts.batch_size,
        elapsed=elapsed,
        loss=loss,
        metrics=metrics,
        evaluation=trainable.evaluate(opts, t, files),
        examples_per_sec=progress.steady_examples_per_sec(),
        first_step_sec=progress.first_step_at,
        checkpoint=ckpts.latest,
        export=str(keras_export.save(model, opts.export_dir)),
    )


def per_worker_dataset(
    opts: Options, files: Files | None, strategy: tf.distribute.ParameterServerStrategy
) -> Any:
    """What each worker reads its batches from: the users' --input, distributed, or a function
    that each worker runs on its own copy of the record files."""
    user_input = trainable.input_plugin(opts)
    if user_input is not None:
        # Each worker runs the user's function with its own InputContext (its shard).
        return strategy.distribute_datasets_from_function(
            lambda ctx: trainable.dataset(user_input, ctx)
        )

    def per_worker() -> tf.data.Dataset:
        # Runs on each worker, reading that worker's copy of the record files; no fixed
        # seed, so workers see different batches.
        assert files is not None
        return inputs.train_dataset(files, opts.batch_size, seed=None)

    return per_worker


def closure_function(
    strategy: tf.distribute.ParameterServerStrategy, step_fn: trainable.StepFn, step: tf.Variable
) -> Any:
    """The function a closure runs on a worker: `n` steps, then the last one's outputs."""

    @tf.function  # type: ignore[untyped-decorator]  # TensorFlow has no annotations
    def train_steps(it: Any, n: int) -> trainable.StepOut:
        for _ in tf.range(n - 1):
            strategy.run(step_fn, args=next(it))
        out: trainable.StepOut = strategy.run(step_fn, args=next(it))
        step.assign_add(n)  # one write to the parameter server per closure, not per step
        return out

    return train_steps


def schedule_steps(
    opts: Options,
    coordinator: tf.distribute.coordinator.ClusterCoordinator,
    train_steps: Any,
    iterator: Any,
    t: trainable.Trainable,
    step: tf.Variable,
    ckpts: Checkpoints,
    progress: Progress,
    scheduled: int,
    watchdog: stall.Watchdog | None,
) -> tuple[int, float, dict[str, float], float]:
    """Schedule closures from step `scheduled` to `opts.steps` (or until a stop is asked for),
    fetch a report at each log boundary, join and save at each checkpoint boundary, then join
    the last ones; (the steps scheduled, the last loss and metrics fetched, the seconds it
    took)."""
    loss, metrics = 0.0, {n: 0.0 for n in t.metrics.names}
    started = time.perf_counter()
    if watchdog is not None:
        watchdog.start()
    STOP.defer()  # the parameter servers serve on until this task has saved
    while scheduled < opts.steps and not STOP.requested:
        n = min(opts.per_call(one_device=False), opts.steps - scheduled)
        remote = coordinator.schedule(train_steps, args=(iterator, n))
        if watchdog is not None:
            watchdog.scheduled(remote)
        before, scheduled = scheduled, scheduled + n
        if scheduled // opts.log_every > before // opts.log_every or scheduled >= opts.steps:
            fetched = fetch_report(remote)
            if fetched is not None:
                loss, metrics = fetched[0], trainable.named(t.metrics.names, fetched[1])
                progress.report(min(int(step.numpy()), scheduled), loss, metrics)
        if scheduled // opts.checkpoint_every > before // opts.checkpoint_every:
            coordinator.join()
            settle(step, scheduled)
            save_checkpoint(ckpts)
    if scheduled < opts.steps:
        return scheduled, loss, metrics, time.perf_counter() - started  # stopped: no join
    coordinator.join()
    if watchdog is not None:
        watchdog.stop()
    return scheduled, loss, metrics, time.perf_counter() - started
