"""The built-in MNIST models, `--model mlp` and `--model cnn`: two users of the `--model`
interface, compiled as any user's model is.

Between-graph training builds the MNIST weights by hand (Keras 3 does not run in graph mode),
in `build_model`'s weight order, so its export loads into `build_model`.
"""

from __future__ import annotations

import keras

from ..data.mnist import IMAGE_BYTES


def build_model(kind: str, hidden_units: int = 500) -> keras.Model:
    """mlp: 784-500-10 as in the classic recipes; cnn: two conv blocks. Uncompiled."""
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


def _mnist(kind: str, hidden_units: int, learning_rate: float) -> keras.Model:
    model = build_model(kind, hidden_units)
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def mlp(*, hidden_units: int = 500, learning_rate: float = 0.001) -> keras.Model:
    """`--model mlp`: the classic MNIST MLP, compiled as any user's model is."""
    return _mnist("mlp", hidden_units, learning_rate)


def cnn(*, hidden_units: int = 500, learning_rate: float = 0.001) -> keras.Model:
    """`--model cnn` (`hidden_units` is the MLP's and plays no part here)."""
    return _mnist("cnn", hidden_units, learning_rate)
