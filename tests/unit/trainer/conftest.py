"""Fixtures shared by the trainer's tests: `files`, a small MNIST-shaped dataset on disk (used by
data/test_inputs.py and strategies/test_sync.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tfjob_trainer.data.mnist import Files


@pytest.fixture
def files(tmp_path) -> Files:
    """100 examples whose first pixel is the example's own number and whose label is its
    number mod 10: a batch shows which examples it holds, and whether labels kept up."""
    n = 100
    images = np.zeros((n, 784), np.uint8)
    images[:, 0] = np.arange(n)
    paths = [tmp_path / name for name in ("ti", "tl", "ei", "el")]
    for path, array in zip(paths, [images, np.arange(n) % 10] * 2, strict=True):
        path.write_bytes(np.ascontiguousarray(array, np.uint8).tobytes())
    return Files(*paths, source="test", train_size=n, test_size=n)
