"""The model a TF2 strategy trains: built by a `--model` function (the built-in MNIST ones are
two of them, in `builtin_models`), compiled by it or by `--loss`, with its optimizer built before a
checkpoint restores the optimizer's slots.
"""

from __future__ import annotations

from typing import Any

import keras

from .. import UsageError, plugins
from ..options import Options


def model_plugin(opts: Options) -> plugins.Plugin:
    """The `--model` function with its arguments; the trainer's own values go to a function
    that has such parameters: `--learning-rate` when given (a user's function keeps its own
    default otherwise), the built-ins' `hidden_units`."""
    offered: dict[str, Any] = {}
    if opts.builtin_model or opts.learning_rate_given:
        offered["learning_rate"] = opts.learning_rate
    if opts.builtin_model:
        offered["hidden_units"] = opts.hidden_units
    return plugins.bind(
        "model", opts.model_spec, opts.model_args, offered=offered, args_flag="model-arg"
    )


def build(opts: Options, plugin: plugins.Plugin | None = None) -> keras.Model:
    """Call the `--model` function (in the caller's strategy scope), compile it from `--loss`
    when it comes uncompiled, and build its optimizer."""
    plugin = plugin or model_plugin(opts)
    model = plugin()
    if not isinstance(model, keras.Model):
        raise UsageError(f"{plugin} returned a {type(model).__name__}, not a keras.Model")
    if getattr(model, "optimizer", None) is None or not model.compiled:
        if opts.loss is None:
            raise UsageError(
                f"{plugin} returned a model that is not compiled: compile it (optimizer, loss, "
                "metrics) in the function, or give --loss (and --optimizer, --metrics)"
            )
        try:
            optimizer = keras.optimizers.get(
                {"class_name": opts.optimizer, "config": {"learning_rate": opts.learning_rate}}
            )
            keras.losses.get(opts.loss)  # checked here; compiled by name, as Keras resolves
            for metric in opts.metrics:  # "accuracy" from the shapes it meets
                keras.metrics.get(metric)
        except (ValueError, TypeError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UsageError(
                f"--loss {opts.loss} --optimizer {opts.optimizer} --metrics "
                f"{','.join(opts.metrics) or '(none)'}: not what Keras knows ({first})"
            ) from None
        model.compile(optimizer=optimizer, loss=opts.loss, metrics=list(opts.metrics))
    if getattr(model, "_compile_loss", None) is None and not model.losses:
        raise UsageError(f"{plugin} returned a model compiled without a loss: give it one")
    return model


def build_optimizer(model: keras.Model) -> keras.optimizers.Optimizer:
    """The compiled optimizer, built now so that its slots exist before a checkpoint restores
    them."""
    optimizer = model.optimizer
    optimizer.build(model.trainable_variables)
    return optimizer
