"""The exported model, `<export-dir>/model.keras`, which every strategy writes at the end.

TF2 strategies save their Keras model directly. Between-graph training runs with eager
execution off, where Keras 3 cannot run: it exports its weights (`weights.npz`, keys sorted in
`get_weights` order) and calls this module in a fresh process to turn them into the
`model.keras` beside them: `python -m tfjob_trainer.output.keras_export WEIGHTS KIND HIDDEN_UNITS`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import keras

FILE = "model.keras"


def save(model: keras.Model, export_dir: Path) -> Path:
    """Write `model` as <export_dir>/model.keras; return its path."""
    export_dir.mkdir(parents=True, exist_ok=True)
    path = export_dir / FILE
    model.save(path)
    return path


def to_keras(weights: Path, kind: str, hidden_units: int) -> Path:
    """The model.keras beside `weights`. Keras is imported only here, after the `__main__`
    block below has quieted TensorFlow's start-up logging."""
    from ..model.builtin_models import build_model

    model = build_model(kind, hidden_units)
    with np.load(weights) as arrays:
        model.set_weights([arrays[k] for k in sorted(arrays.files)])
    return save(model, weights.parent)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    print(to_keras(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
