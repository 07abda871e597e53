"""The model function the trainer calls (`--model=tabular_example.models:regression`), inside
its distribution strategy's scope, so every variable is created where the strategy wants it."""

from __future__ import annotations

import keras

from .schema import COLUMNS


def regression(*, units: int = 32, learning_rate: float = 1e-3) -> keras.Model:
    """A two-layer MLP for a scalar target, compiled: the trainer trains, evaluates and reports
    with what is compiled here (Adam on the mean squared error, plus the mean absolute error).

    `units` comes from `--model-arg units=64`; `learning_rate` from `--learning-rate`.
    """
    inputs = keras.Input(shape=(COLUMNS,), name="features")
    hidden = keras.layers.Dense(units, activation="relu")(inputs)
    hidden = keras.layers.Dense(units, activation="relu")(hidden)
    outputs = keras.layers.Dense(1, name="prediction")(hidden)
    model = keras.Model(inputs, outputs, name="tabular_regression")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss="mse",
        metrics=["mae"],
    )
    return model
