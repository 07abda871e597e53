"""Synchronous training: MirroredStrategy (devices of one host) and MultiWorkerMirroredStrategy
(all-reduce across workers). One custom loop serves both; Keras `fit` does not work under
MultiWorkerMirroredStrategy in TF 2.21."""

from __future__ import annotations

import contextlib
import logging
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from tfjob_protocol.result import Result

from .. import TaskFailed
from ..config import Task
from ..data.inputs import MemoryBatches, train_dataset
from ..data.mnist import Files
from ..model import trainable
from ..model.trainable import StepFn, StepOut
from ..options import Options
from ..output import keras_export, summaries, task_result
from ..output.checkpoints import Checkpoints
from ..output.progress_log import Progress
from ..runtime.stopping import STOP, leave

log = logging.getLogger(__name__)


def mirrored(opts: Options, files: Files | None, task: Task | None) -> Result:
    """One process, every local device (or `--cpu-devices` logical CPUs), gradients averaged.
    (`task` is there for the one signature of `registry`: there is no cluster to join.)"""
    devices = None
    if opts.cpu_devices > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(opts.cpu_devices)]
        )
        devices = [f"/cpu:{i}" for i in range(opts.cpu_devices)]
    if devices is None and len(tf.config.list_physical_devices("GPU")) < 2:
        # One device: no replicas to average, so the default strategy and a loop of its own.
        return train(
            tf.distribute.get_strategy(), opts, files, is_chief=True, name="mirrored", single=True
        )
    strategy = tf.distribute.MirroredStrategy(devices)
    return train(strategy, opts, files, is_chief=True, name="mirrored")


# How a lost peer surfaces in a collective: its connection resets (Unavailable), or the
# coordination service, whose heartbeats MultiWorkerMirroredStrategy turns on, finds it silent
# (Unavailable, DeadlineExceeded) and aborts every collective; ops in flight end Cancelled.
PEER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.CancelledError,
    tf.errors.AbortedError,
)
_ABORTED_BY = "Collective ops is aborted by:"
_NOT_CAUSE = ("Additional GRPC", "The error could", "The tasks have", "\t", "[[")


def multi_worker(opts: Options, files: Files | None, task: Task | None) -> Result:
    """Every worker (and the chief, if any) trains; the chief saves for real."""
    assert task is not None, "multi-worker-mirrored needs TF_CONFIG"
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    try:
        return train(
            strategy,
            opts,
            files,
            is_chief=task.is_chief,
            name="multi-worker-mirrored",
            seed=task.rank,  # each trainer's batches of its own
            agree=True,
        )
    except PEER_ERRORS as e:
        raise TaskFailed(
            f"lost a peer ({abort_cause(e)}): synchronous training needs every worker, so "
            "this one stops too"
        ) from e


def abort_cause(error: tf.errors.OpError) -> str:
    """TensorFlow's reason for aborting the collectives, on one line (its message spans many)."""
    lines = error.message.splitlines()
    for i, line in enumerate(lines):
        if _ABORTED_BY in line:
            cause = [line.split(_ABORTED_BY, 1)[1].strip()]
            for more in filter(str.strip, lines[i + 1 :]):
                if more.startswith(_NOT_CAUSE):
                    break
                cause.append(more.strip())
            return " ".join(cause)
    return type(error).__name__


def _boundary(current: int, every: int) -> int:
    return every - current % every


# XLA on the CPU: compiling the MLP's whole loop speeds it up, while the CNN's convolutions
# run slower compiled than in TensorFlow's own kernels (figures: benchmarks/README.md).
XLA_MODELS = frozenset({"mlp"})


def memory_loop(
    strategy: tf.distribute.Strategy,
    step_fn: StepFn,
    step: tf.Variable,
    batches: MemoryBatches,
    jit: bool,
) -> Callable[[tf.Tensor], StepOut]:
    """`n` steps in one call, each process's one replica fed from the data in memory, gathered
    in the graph. On one device and for the models XLA speeds up, the whole loop is one
    compiled computation. Under a strategy, tf.data's distributed iterator slowed a one-core
    worker down on the CNN (MultiWorkerMirrored, and Mirrored on one device, alike); batches
    drawn in the graph keep the single process's pace."""

    def train_steps(n: tf.Tensor) -> StepOut:
        first, n = step.read_value(), tf.cast(n, tf.int64)
        for i in tf.range(n - 1):
            strategy.run(step_fn, args=batches(first + i))
        out = strategy.run(step_fn, args=batches(first + n - 1))
        step.assign_add(n)
        return reduce_sum(strategy, out)

    compiled: Callable[[tf.Tensor], StepOut] = tf.function(train_steps, jit_compile=jit)
    return compiled


def reduce_sum(strategy: tf.distribute.Strategy, out: Any) -> StepOut:
    """The step's (loss, metrics) summed over replicas: each replica's share was divided by
    their number, so the sums are the means."""
    total = tf.distribute.ReduceOp.SUM
    summed: StepOut = tf.nest.map_structure(lambda v: strategy.reduce(total, v, axis=None), out)
    return summed


# A worker's throwaway copy of each save (`save_dir`).
SCRATCH_PREFIX = "tfjob-ckpt-"


def train(
    strategy: tf.distribute.Strategy,
    opts: Options,
    files: Files | None,
    *,
    is_chief: bool,
    name: str,
    single: bool = False,
    seed: int = 0,
    agree: bool = False,
) -> Result:
    """The loop of steps every synchronous strategy runs; `single`: one device, no replicas;
    `agree`: several processes, which must stop at one step (`Agreement`). A stop on request
    leaves (`leave`, which ends the process at once) only once `save_dir` is cleaned up."""
    with save_dir(opts, is_chief) as saves:
        outcome = _train(strategy, opts, files, saves, is_chief, name, single, seed, agree)
    if isinstance(outcome, Stopped):
        leave(outcome.step)
    return outcome


@contextlib.contextmanager
def save_dir(opts: Options, is_chief: bool) -> Iterator[Path]:
    """Where this task saves: the job's checkpoint directory for the chief. Every worker must
    save too (saving is collective), but the others' copies are thrown away: each saves into
    a temporary directory of its own, removed as the training ends, however it ends (done,
    stopped and saved, an error), not left behind at every run (megabytes each)."""
    if is_chief:
        yield opts.checkpoint_dir
        return
    with tempfile.TemporaryDirectory(prefix=SCRATCH_PREFIX, ignore_cleanup_errors=True) as own:
        yield Path(own)


@dataclass(frozen=True)
class Stopped:
    """Stopped on request at `step`, saved there by every worker."""

    step: int


def _train(
    strategy: tf.distribute.Strategy,
    opts: Options,
    files: Files | None,
    saves: Path,
    is_chief: bool,
    name: str,
    single: bool,
    seed: int,
    agree: bool,
) -> Result | Stopped:
    """`train` saving into `saves`; its result, or where it stopped on request."""
    global_batch = opts.batch_size * strategy.num_replicas_in_sync
    with strategy.scope():
        t = trainable.prepare(opts, files)
        step = tf.Variable(
            0,
            dtype=tf.int64,
            trainable=False,
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
        )
    model, optimizer = t.model, t.optimizer
    # Only the chief writes where it counts (`save_dir`).
    ckpts = Checkpoints(saves, step, model, optimizer, writer=is_chief)
    start_step = ckpts.restore(tf.train.latest_checkpoint(str(opts.checkpoint_dir)))
    train_steps = steps_function(
        strategy, opts, files, t, step, global_batch, start_step, single=single, seed=seed
    )
    progress = Progress(
        summaries.writer(opts) if is_chief else None,
        global_batch,
        start_step,
        details=summaries.details(opts, files) if is_chief else None,
        weights=lambda: model.trainable_variables,
        metrics_file=opts.metrics_file if is_chief else None,
    )
    stop = Agreement(strategy) if agree else None
    current, loss, metrics, elapsed = run_steps(
        train_steps,
        opts,
        t,
        ckpts,
        progress,
        start_step,
        is_chief=is_chief,
        single=single,
        stop=stop,
    )
    if current < opts.steps:  # stopped on request, saved at `current` by every worker
        log.info(
            "stopped at step %d, saved %s; a restart resumes from step %d",
            current,
            ckpts.latest,
            current,
        )
        return Stopped(current)
    if start_step >= opts.steps:
        log.info("already trained to step %d; nothing to do", start_step)
    export_path = keras_export.save(model, opts.export_dir if is_chief else saves / "export")
    evaluation = trainable.evaluate(opts, t, files) if is_chief else None
    return task_result.trained(
        name,
        steps=current,
        trained_steps=current - start_step,
        examples_per_step=global_batch,
        elapsed=elapsed,
        loss=loss,
        metrics=metrics,
        evaluation=evaluation,
        examples_per_sec=progress.steady_examples_per_sec(),
        first_step_sec=progress.first_step_at,
        # A worker's copy is gone with its directory: only the chief's checkpoint stays.
        checkpoint=ckpts.latest if is_chief else None,
        export=str(export_path) if is_chief else None,
        replicas=strategy.num_replicas_in_sync,
    )


def steps_function(
    strategy: tf.distribute.Strategy,
    opts: Options,
    files: Files | None,
    t: trainable.Trainable,
    step: tf.Variable,
    global_batch: int,
    start_step: int,
    *,
    single: bool,
    seed: int,
) -> Callable[[tf.Tensor], StepOut]:
    """The call that runs `n` steps: fed from the data in memory when this process has one
    replica (`memory_loop`), else from the strategy's distributed dataset (the users' --input,
    or several replicas)."""
    user_input = trainable.input_plugin(opts)

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        if user_input is not None:
            return trainable.dataset(user_input, ctx)
        assert files is not None
        return train_dataset(
            files,
            ctx.get_per_replica_batch_size(global_batch),
            ctx.num_input_pipelines,
            ctx.input_pipeline_id,
            seed=start_step,
        )

    step_fn = trainable.make_step_fn(t)
    one_replica = single or len(strategy.extended.worker_devices) == 1
    if one_replica and files is not None and user_input is None:
        # One replica in this process: it draws its own batches (a seed of its own per worker).
        batches = MemoryBatches(files, opts.batch_size, seed=seed)
        jit = single and opts.model in XLA_MODELS
        return memory_loop(strategy, step_fn, step, batches, jit)
    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

    @tf.function  # type: ignore[untyped-decorator]  # TensorFlow has no annotations
    def train_steps(n: tf.Tensor) -> StepOut:
        # Only the last step's loss and metrics are reduced: across workers each reduce
        # is one more all-reduce.
        for _ in tf.range(n - 1):
            strategy.run(step_fn, args=next(iterator))
        out = strategy.run(step_fn, args=next(iterator))
        step.assign_add(tf.cast(n, tf.int64))
        return reduce_sum(strategy, out)

    compiled: Callable[[tf.Tensor], StepOut] = train_steps
    return compiled


class Agreement:
    """Whether any worker was asked to stop, agreed by every worker at the same step: saving is
    collective, so all must save at one step or none can.

    Each worker's flag (its own SIGTERM) is summed over the workers between calls of the
    training function, one scalar all-reduce per call, so every worker leaves the loop after
    the same call. TensorFlow's `PreemptionCheckpointHandler` agrees through the coordination
    service instead, but it counts and checkpoints its own run counter, restores at its
    construction and saves other workers' copies where it chooses; the trainer's step counter,
    checkpoint names and restore order stay as they are with this one reduction.
    """

    def __init__(self, strategy: tf.distribute.Strategy) -> None:
        self.flag = tf.Variable(0.0, trainable=False)  # this worker's, not mirrored

        @tf.function  # type: ignore[untyped-decorator]  # TensorFlow has no annotations
        def summed() -> tf.Tensor:
            per_replica = strategy.run(lambda: tf.identity(self.flag))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        self.summed = summed

    def agreed(self) -> bool:
        if STOP.requested:
            self.flag.assign(1.0)
        return float(self.summed()) > 0


def run_steps(
    train_steps: Callable[[tf.Tensor], StepOut],
    opts: Options,
    t: trainable.Trainable,
    ckpts: Checkpoints,
    progress: Progress,
    current: int,
    *,
    is_chief: bool,
    single: bool,
    stop: Agreement | None = None,
) -> tuple[int, float, dict[str, float], float]:
    """Train from step `current` to `opts.steps`, a call never past a log or checkpoint
    boundary, or until a stop is asked for, then save; (the step reached, the last loss and
    metrics logged, the seconds it took). `stop`: where several processes agree on the stop;
    without it, this process's own SIGTERM decides."""
    loss, metrics = 0.0, {n: 0.0 for n in t.metrics.names}
    started = time.perf_counter()
    # The step of the newest checkpoint, as every worker knows it alike (a worker's own copy
    # may have none): a step past 0 to start from was restored.
    saved_at = current if current > 0 else None
    STOP.defer()
    while current < opts.steps:
        if stop.agreed() if stop is not None else STOP.requested:
            if saved_at != current:
                ckpts.save()  # collective under MultiWorkerMirrored: every worker, this step
            break
        n = min(
            opts.per_call(one_device=single),
            opts.steps - current,
            _boundary(current, opts.log_every),
            _boundary(current, opts.checkpoint_every),
        )
        loss_t, metrics_t = train_steps(tf.constant(n))  # dispatched; read only when logging
        current += n
        if current % opts.log_every == 0 or current == opts.steps:
            loss, metrics = float(loss_t), trainable.named(t.metrics.names, metrics_t)
            if is_chief:
                progress.report(current, loss, metrics)
        if current % opts.checkpoint_every == 0 or current == opts.steps:
            ckpts.save()
            saved_at = current
    return current, loss, metrics, time.perf_counter() - started
