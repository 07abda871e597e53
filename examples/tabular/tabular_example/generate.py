"""Write the example's data set: a noisy, partly non-linear regression target from 8 numeric
columns, as TFRecord files of tf.train.Example, the format the input functions read.

    python -m tabular_example.generate --out DIR

Deterministic (a fixed seed), so every image build and every machine trains on the same data.
Several train files, so the trainer can shard them by file across workers.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf

from .schema import COLUMNS, EVAL_PATTERN, FEATURES, TARGET, TRAIN_PATTERN

WEIGHTS = np.array([0.5, -0.4, 0.3, 0.2, -0.2, 0.1, 0.0, 0.0], dtype=np.float32)
NOISE = 0.1  # the target's noise: no model gets its MSE below NOISE**2 = 0.01


def target(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Linear in most columns, with a sine and an interaction a linear model cannot fit."""
    y = x @ WEIGHTS + 0.5 * np.sin(2.0 * x[:, 0]) + 0.3 * x[:, 1] * x[:, 2]
    return (y + rng.normal(0.0, NOISE, size=len(x))).astype(np.float32)


def example(features: np.ndarray, label: float) -> bytes:
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                FEATURES: tf.train.Feature(float_list=tf.train.FloatList(value=features)),
                TARGET: tf.train.Feature(float_list=tf.train.FloatList(value=[label])),
            }
        )
    ).SerializeToString()


def write_split(
    out: Path, pattern: str, files: int, examples: int, rng: np.random.Generator
) -> list[Path]:
    """`examples` rows split evenly over `files` files named after `pattern` (its * an index)."""
    x = rng.normal(size=(examples, COLUMNS)).astype(np.float32)
    y = target(x, rng)
    paths = []
    for index, rows in enumerate(np.array_split(np.arange(examples), files)):
        path = out / pattern.replace("*", f"{index:05d}-of-{files:05d}")
        with tf.io.TFRecordWriter(str(path)) as writer:
            for row in rows:
                writer.write(example(x[row], float(y[row])))
        paths.append(path)
    return paths


def generate(
    out: Path,
    *,
    train_files: int = 8,
    train_examples: int = 16384,
    eval_files: int = 2,
    eval_examples: int = 2048,
    seed: int = 0,
) -> list[Path]:
    """Write both splits into `out`, replacing any earlier ones; return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    for pattern in (TRAIN_PATTERN, EVAL_PATTERN):
        for old in out.glob(pattern):  # a run with fewer files must not leave extra shards
            old.unlink()
    train_rng, eval_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    return [
        *write_split(out, TRAIN_PATTERN, train_files, train_examples, train_rng),
        *write_split(out, EVAL_PATTERN, eval_files, eval_examples, eval_rng),
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tabular_example.generate", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="directory to write into")
    parser.add_argument("--train-files", type=int, default=8)
    parser.add_argument("--train-examples", type=int, default=16384)
    parser.add_argument("--eval-files", type=int, default=2)
    parser.add_argument("--eval-examples", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    paths = generate(
        args.out,
        train_files=args.train_files,
        train_examples=args.train_examples,
        eval_files=args.eval_files,
        eval_examples=args.eval_examples,
        seed=args.seed,
    )
    print(f"wrote {len(paths)} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
