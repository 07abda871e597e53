"""Turn exported weights (`weights.npz`, keys sorted in `get_weights` order) into the
`model.keras` beside them. Between-graph training runs with eager execution off, where Keras 3
cannot run, so it calls this in a fresh process:
`python -m tfjob_trainer.keras_export WEIGHTS KIND HIDDEN_UNITS`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np


def to_keras(weights: Path, kind: str, hidden_units: int) -> Path:
    from . import common

    model = common.build_model(kind, hidden_units)
    with np.load(weights) as arrays:
        model.set_weights([arrays[k] for k in sorted(arrays.files)])
    return common.export(model, weights.parent)


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    print(to_keras(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
