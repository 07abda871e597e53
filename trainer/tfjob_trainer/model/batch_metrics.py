"""A compiled model's loss and metrics, as the trainer's own loops compute them.

Keras keeps metrics as state (variables a `Metric` accumulates). Under a parameter-server
strategy those variables would live on the parameter servers, one more remote write per metric
and step. A training step here computes each metric of the batch instead, from the function a
Keras `MeanMetricWrapper` holds (accuracy, mae, mse, ...: most compiled metrics), with no state;
metrics that only exist as state (AUC, precision, ...) are left to the evaluation, which runs
them as Keras does, in one process.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import keras
import tensorflow as tf

from .. import UsageError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchMetric:
    name: str
    output: int  # which flattened output (and label) of the model it reads
    fn: Callable[..., Any]
    kwargs: dict[str, Any]


class BatchMetrics:
    """The stateless per-batch form of a compiled model's metrics, in Keras' names."""

    def __init__(self, model: keras.Model, y: Any, y_pred: Any) -> None:
        """`y`, `y_pred`: one batch's labels and predictions, to build the compiled metrics
        (Keras resolves e.g. "accuracy" from their shapes)."""
        self.metrics: list[BatchMetric] = []
        self.stateful: list[str] = []
        compiled = getattr(model, "_compile_metrics", None)
        if compiled is None:
            return
        if not compiled.built:
            compiled.build(y, y_pred)
        # Keras' own layout of compiled metrics (3.x): one list per output, each metric's
        # function and arguments. Should a release change it, the metrics are the
        # evaluation's alone, as stateful ones are, and training goes on.
        for output, listed in enumerate(getattr(compiled, "_flat_metrics", None) or []):
            if not listed:
                continue
            for m in getattr(listed, "metrics", []):
                name = f"{listed.output_name}_{m.name}" if listed.output_name else m.name
                fn = getattr(m, "_fn", None)
                if isinstance(m, keras.metrics.MeanMetricWrapper) and callable(fn):
                    kwargs = dict(getattr(m, "_fn_kwargs", None) or {})
                    self.metrics.append(BatchMetric(name, output, fn, kwargs))
                else:
                    self.stateful.append(name)
        if self.stateful:
            log.info(
                "metrics %s keep state: the evaluation reports them, the training steps do not",
                ", ".join(self.stateful),
            )

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.metrics]

    def values(self, y: Any, y_pred: Any) -> tuple[tf.Tensor, ...]:
        """Each metric's mean over this batch."""
        ys, preds = tf.nest.flatten(y), tf.nest.flatten(y_pred)
        return tuple(
            tf.reduce_mean(tf.cast(m.fn(ys[m.output], preds[m.output], **m.kwargs), tf.float32))
            for m in self.metrics
        )


def check_batch(where: str, batch: Any) -> tuple[Any, Any]:
    """A dataset element must be (features, labels), as `Model.fit` takes it."""
    if not isinstance(batch, tuple) or len(batch) not in (2, 3):
        shape = tf.nest.map_structure(lambda t: getattr(t, "shape", type(t).__name__), batch)
        raise UsageError(
            f"{where} yields {type(batch).__name__} elements ({shape}), not (features, labels) "
            "tuples"
        )
    return batch[0], batch[1]


def evaluate(model: keras.Model, batches: Iterable[Any]) -> dict[str, float]:
    """Loss and every compiled metric over a finite dataset, by `Model.evaluate`, in this
    process. Keras warns that the input "ran out of data" whenever it cannot know a dataset's
    length beforehand (any sharded or interleaved one): one pass is what is asked here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        results = model.evaluate(batches, verbose=0, return_dict=True)
    return {k: float(v) for k, v in results.items()}
