"""What every TF2 strategy trains, the same way for the built-in MNIST model and a user's:
the model from `--model` built in the strategy's scope and checked against one batch of its
input, the step, the input functions, and the final evaluation.

A user's mistake found here (an input that is not `(features, labels)`, features that do not
fit the model, labels that do not fit its loss) is a `UsageError`: every trainer meets it at the
same point, before its first step, and exits 2 with one line.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from .. import UsageError, plugins
from ..data.mnist import Files, read_test
from ..options import Options
from . import batch_metrics as compiled
from .batch_metrics import BatchMetrics, check_batch
from .build import build, build_optimizer, model_plugin

log = logging.getLogger(__name__)

# A step's loss and its metrics' batch means.
StepOut = tuple[tf.Tensor, tuple[tf.Tensor, ...]]
StepFn = Callable[..., StepOut]
EVAL_BATCH = 2000  # the built-in evaluation's batch
# What Keras and TensorFlow raise for a shape or dtype that does not fit (a cast that does not
# exist, e.g. string labels for a regression, is Unimplemented).
SHAPE_ERRORS = (
    ValueError,
    TypeError,
    tf.errors.InvalidArgumentError,
    tf.errors.UnimplementedError,
)


def input_plugin(opts: Options, flag: str = "input") -> plugins.Plugin | None:
    """`--input` (or `--eval-input`) bound to its arguments; None for the built-in input."""
    spec = opts.input if flag == "input" else opts.eval_input
    if spec is None:
        return None
    offered = {
        "batch_size": opts.batch_size,
        "data_dir": str(opts.data_dir) if opts.data_dir else None,
    }
    # The evaluation's function takes those --input-arg arguments it has parameters for.
    return plugins.bind(
        flag,
        spec,
        opts.input_args,
        offered=offered,
        positional=1,
        args_flag="input-arg",
        shared=flag == "eval-input",
    )


def dataset(plugin: plugins.Plugin, context: tf.distribute.InputContext) -> tf.data.Dataset:
    """The user's dataset for one input pipeline."""
    ds = plugin(context)
    if not isinstance(ds, tf.data.Dataset):
        raise UsageError(f"{plugin} returned a {type(ds).__name__}, not a tf.data.Dataset")
    return ds


def sample_batch(opts: Options, files: Files | None, flag: str = "input") -> tuple[Any, Any]:
    """One batch of the input (`flag`), read here: what the model is built and checked on."""
    plugin = input_plugin(opts, flag)
    if plugin is None:
        assert files is not None
        x, y = read_test(files)
        return x[: opts.batch_size].astype(np.float32) / 255.0, y[: opts.batch_size].astype(
            np.int32
        )
    for batch in dataset(plugin, tf.distribute.InputContext()).take(1):
        return check_batch(str(plugin), batch)
    raise UsageError(f"{plugin} returned an empty dataset")


@dataclass
class Trainable:
    model: keras.Model
    optimizer: keras.optimizers.Optimizer
    metrics: BatchMetrics
    plugin: plugins.Plugin


def prepare(opts: Options, files: Files | None, flag: str = "input") -> Trainable:
    """The model, built and checked on a batch of the input `flag`, with its optimizer: call
    in the strategy's scope, so that the variables are the strategy's."""
    plugin = model_plugin(opts)
    model = build(opts, plugin)
    x, y = sample_batch(opts, files, flag)
    spec = opts.input if flag == "input" else opts.eval_input
    where = f"--{flag} {spec}" if spec else f"the built-in {opts.dataset} input"
    try:
        y_pred = model(x, training=False)
    except SHAPE_ERRORS as e:  # anything else is the model's own code: its traceback
        raise UsageError(
            f"{where} yields features {_shapes(x)} that do not fit {plugin}: {_first_line(e)}"
        ) from None
    try:
        model.compute_loss(x=x, y=y, y_pred=y_pred, training=False)
    except SHAPE_ERRORS as e:
        raise UsageError(
            f"{where} yields labels {_shapes(y)} that do not fit the output {_shapes(y_pred)} "
            f"of {plugin} and its loss: {_first_line(e)}"
        ) from None
    return Trainable(model, build_optimizer(model), BatchMetrics(model, y, y_pred), plugin)


def _shapes(value: Any) -> str:
    shapes = tf.nest.map_structure(lambda t: tuple(getattr(t, "shape", ())), value)
    return str(shapes).replace(" ", "")


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


def make_step_fn(t: Trainable) -> StepFn:
    """One replica's step on a `(features, labels[, sample_weight])` batch: the compiled loss
    (Keras divides it by the replicas in sync, so replicas' gradients add up), and each
    metric's batch mean divided likewise, so a SUM across replicas gives the mean."""
    model, optimizer, batch_metrics = t.model, t.optimizer, t.metrics

    def step_fn(x: Any, y: Any, sample_weight: Any = None) -> StepOut:
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
            )
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        replicas = tf.distribute.get_replica_context().num_replicas_in_sync
        return loss, tuple(v / replicas for v in batch_metrics.values(y, y_pred))

    return step_fn


def eval_batches(opts: Options, files: Files | None) -> tf.data.Dataset | None:
    """One pass over the evaluation data: `--eval-input`, or the built-in test set."""
    plugin = input_plugin(opts, "eval-input")
    if plugin is not None:
        return dataset(plugin, tf.distribute.InputContext())
    if opts.builtin_input and files is not None:
        x, y = read_test(files)
        ds = tf.data.Dataset.from_tensor_slices((x.astype(np.float32) / 255.0, y.astype(np.int32)))
        return ds.batch(EVAL_BATCH)
    return None


def evaluate(opts: Options, t: Trainable, files: Files | None) -> dict[str, float] | None:
    """Loss and every compiled metric over the evaluation data, by `Model.evaluate` in this
    process, on a copy of the trained weights outside the training strategy (where Keras'
    own loops do not run)."""
    batches = eval_batches(opts, files)
    if batches is None:
        return None
    local = build(opts, t.plugin)
    x, _ = sample_batch(opts, files, "eval-input")  # builds it; no training pipeline to fill
    local(x, training=False)
    local.set_weights([np.asarray(w) for w in t.model.get_weights()])
    return compiled.evaluate(local, batches)


def named(names: list[str], values: tuple[Any, ...]) -> dict[str, float]:
    return {n: float(v) for n, v in zip(names, values, strict=True)}
