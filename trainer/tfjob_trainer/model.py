"""The Keras model every TF2 strategy trains, and its optimizer. Between-graph training builds
the same weights by hand (Keras 3 does not run in graph mode), in this model's weight order, so
its export loads into `build_model`."""

from __future__ import annotations

import keras

from .data import IMAGE_BYTES
from .options import Options


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
    """Adam, built now so that its slots exist before a checkpoint restores them."""
    optimizer = keras.optimizers.Adam(opts.learning_rate)
    optimizer.build(model.trainable_variables)
    return optimizer
