"""Regression on eight numbers and a category: a functional model with two named inputs."""

from __future__ import annotations

import keras

KINDS = 4


def regression(*, units: int = 32, learning_rate: float = 0.03) -> keras.Model:
    x = keras.Input((8,), name="x")
    kind = keras.Input((), dtype="int64", name="kind")
    embedded = keras.layers.Embedding(KINDS, 4)(kind)
    hidden = keras.layers.Dense(units, activation="relu")(keras.layers.Concatenate()([x, embedded]))
    model = keras.Model({"x": x, "kind": kind}, keras.layers.Dense(1)(hidden), name="toy")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss="mse", metrics=["mae"])
    return model


def uncompiled(*, units: int = 32) -> keras.Model:
    """For `--loss`: the same model, left to the trainer to compile."""
    model = regression(units=units)
    return keras.Model(model.inputs, model.outputs, name="toy_uncompiled")


def wide() -> keras.Model:
    """A model whose input does not fit the data: 9 numbers where the data has 8."""
    x = keras.Input((9,), name="x")
    model = keras.Model(x, keras.layers.Dense(1)(x))
    model.compile(optimizer="adam", loss="mse")
    return model


def broken() -> keras.Model:
    """A bug of the user's own: its traceback is theirs to read."""
    raise RuntimeError("the user's own bug")
