"""TensorBoard: where a task's event files go, and the content beyond the scalars, as the
classic distributed-TensorFlow tutorials log it: a histogram of each layer's weights and
biases, and a few of the input images.

Histograms are written at the first report, then every `--histogram-every` steps; the images
once. TF2 strategies write them with `tf.summary`; between-graph training has no eager mode, so
it writes the same as Summary protos (`histogram_proto`, `image_proto`).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from ..data.mnist import IMAGE_BYTES, Files
from ..options import Options

IMAGES = 4  # input images shown
BUCKETS = 30  # histogram buckets
v1 = tf.compat.v1


def writer(opts: Options, name: str = "train") -> Any:
    """A `tf.summary` writer into <log-dir>/<name>: "train" for the chief, "eval" for the
    evaluator, the two runs TensorBoard shows side by side."""
    return tf.summary.create_file_writer(str(opts.log_dir / name))


def details(opts: Options, files: Files | None) -> Details:
    """Weight histograms every --histogram-every steps, and a few input images, once (for the
    built-in MNIST input; a user's features need not be images)."""
    images = sample_images(files) if files is not None and opts.builtin_input else None
    return Details(opts.histogram_every, images)


def sample_images(files: Files, count: int = IMAGES) -> np.ndarray:
    """The first training images, as uint8 (count, 28, 28)."""
    with open(files.train_images, "rb") as f:
        raw = f.read(count * IMAGE_BYTES)
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, 28, 28)


def tag(variable: Any) -> str:
    """A weight's TensorBoard tag: its path in the model, e.g. dense/kernel."""
    name: str = getattr(variable, "path", None) or variable.name
    return name.split(":")[0]


@dataclass
class Details:
    """When to write the histograms, and the images to show once."""

    every: int
    images: np.ndarray | None
    last: int | None = None
    images_written: bool = False

    def due(self, step: int) -> bool:
        return self.last is None or step - self.last >= self.every

    def write(self, writer: Any, step: int, weights: Iterable[Any]) -> None:
        """With a `tf.summary` writer (TF2 strategies), if due."""
        if writer is None or not self.due(step):
            return
        with writer.as_default(step=step):
            for w in weights:
                tf.summary.histogram(tag(w), np.asarray(w.numpy()), buckets=BUCKETS)
            if not self.images_written and self.images is not None:
                tf.summary.image("input", self.images[..., None], max_outputs=len(self.images))
        writer.flush()
        self.last, self.images_written = step, True

    def write_protos(
        self, writer: Any, step: int, read: Callable[[], list[tuple[str, np.ndarray]]]
    ) -> None:
        """With a v1 FileWriter (between-graph); `read` fetches (tag, values), if due."""
        if writer is None or not self.due(step):
            return
        values = [v1.Summary.Value(tag=t, histo=histogram_proto(a)) for t, a in read()]
        if not self.images_written and self.images is not None:
            values += [
                v1.Summary.Value(tag=f"input/image/{i}", image=image_proto(img))
                for i, img in enumerate(self.images)
            ]
        writer.add_summary(v1.Summary(value=values), global_step=step)
        writer.flush()
        self.last, self.images_written = step, True


def histogram_proto(values: np.ndarray, buckets: int = BUCKETS) -> Any:
    """A HistogramProto of `values`, as TensorBoard's histogram dashboard reads it."""
    flat = np.asarray(values, dtype=np.float64).ravel()
    counts, edges = np.histogram(flat, bins=buckets)
    return v1.HistogramProto(
        min=float(flat.min()),
        max=float(flat.max()),
        num=float(flat.size),
        sum=float(flat.sum()),
        sum_squares=float(np.square(flat).sum()),
        bucket_limit=[float(e) for e in edges[1:]],
        bucket=[float(c) for c in counts],
    )


def image_proto(image: np.ndarray) -> Any:
    """A grayscale uint8 image as a Summary image (PNG-encoded, with no eager TensorFlow)."""
    height, width = image.shape
    return v1.Summary.Image(
        height=height, width=width, colorspace=1, encoded_image_string=png(image)
    )


def png(image: np.ndarray) -> bytes:
    """An 8-bit grayscale PNG of a 2-D uint8 array."""
    height, width = image.shape

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\0" + bytes(row) for row in np.asarray(image, dtype=np.uint8))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )
