"""Input functions for training data in files on a volume (`--data-dir`), for `--input`.

A plug-in input function takes a `tf.distribute.InputContext` and returns a dataset of
per-replica batches, as `Strategy.distribute_datasets_from_function` expects. Every input
pipeline must read its own share of the data, the dataset must repeat forever (the trainer
counts steps) and the per-example work should be batched: that is the same few lines in every
such function, and easy to get subtly wrong (an unsharded pipeline trains every worker on the
same examples). Here they are once: `files` and `sharded` to build your own input function,
and two ready ones, `tfrecords` (serialized `tf.train.Example`) and `csv`. See trainer/DATA.md.
"""

from __future__ import annotations

import csv as csvlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf

from .. import UsageError

log = logging.getLogger(__name__)

# `features` dtypes: the three a tf.train.Example can hold.
DTYPES: dict[str, tf.dtypes.DType] = {
    "float32": tf.float32,
    "int64": tf.int64,
    "string": tf.string,
}
COMPRESSIONS = ("", "GZIP", "ZLIB")
# `csv` label dtypes.
CSV_LABEL_DTYPES: dict[str, tf.dtypes.DType] = {
    "float32": tf.float32,
    "int32": tf.int32,
    "int64": tf.int64,
}
GRAMMAR = "name:dtype[:length],... e.g. x:float32:8,label:int64"


def files(data_dir: str | Path | None, pattern: str) -> list[str]:
    """The files under `data_dir` matching the glob `pattern` (`**` matches any depth), sorted.

    Raises UsageError when `data_dir` is unset or missing, or when nothing matches.
    """
    if data_dir is None or str(data_dir) == "":
        raise UsageError(
            "--data-dir (TFJOB_DATA_DIR) is not set: give the directory that holds the input "
            f"files ({pattern!r})"
        )
    root = Path(data_dir)
    if not root.exists():
        raise UsageError(f"--data-dir {root} does not exist")
    if not root.is_dir():
        raise UsageError(f"--data-dir {root} is not a directory")
    try:
        found = sorted(str(p) for p in root.glob(pattern) if p.is_file())
    except (ValueError, NotImplementedError) as e:  # "" or an absolute pattern
        raise UsageError(f"file pattern {pattern!r}: {e} (give a glob relative to {root})") from e
    if not found:
        raise UsageError(f"no file under --data-dir {root} matches {pattern!r}")
    return found


def sharded(
    ctx: tf.distribute.InputContext,
    paths: list[str],
    read: Callable[[tf.data.Dataset], tf.data.Dataset],
    *,
    seed: int | None = None,
) -> tf.data.Dataset:
    """The records of `paths` that this input pipeline reads: each record once per epoch, in
    one pipeline only. Not shuffled record by record, not repeated, not batched.

    `read` turns a dataset of one filename into that file's records, e.g.
    `tf.data.TFRecordDataset`. With at least as many files as input pipelines each pipeline
    reads its own files (in a new order every epoch, several at a time); with fewer, every
    pipeline reads every file and keeps every n-th record.
    """
    n, index = ctx.num_input_pipelines, ctx.input_pipeline_id
    if not paths:
        raise UsageError("no input files to read")
    names = tf.data.Dataset.from_tensor_slices(tf.constant(paths, tf.string))

    def one(path: tf.Tensor) -> tf.data.Dataset:
        return read(tf.data.Dataset.from_tensors(path))

    if len(paths) >= n:
        mine = len(range(index, len(paths), n))
        log.info(
            "%s for %s: sharding by file (pipeline %d reads %d)",
            _count(len(paths), "file"),
            _count(n, "input pipeline"),
            index,
            mine,
        )
        names = names.shard(n, index).shuffle(mine, seed=seed, reshuffle_each_iteration=True)
        return names.interleave(
            one,
            cycle_length=min(mine, 16),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=seed is not None,
        )
    log.info(
        "%s for %s: sharding by example (each pipeline reads every file)",
        _count(len(paths), "file"),
        _count(n, "input pipeline"),
    )
    # Every pipeline must see the records in the same order for shard() to split them.
    records = names.interleave(
        one,
        cycle_length=len(paths),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    return records.shard(n, index)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@dataclass(frozen=True)
class Feature:
    """One entry of a features spec: `name:dtype[:length]`."""

    name: str
    dtype: tf.dtypes.DType
    shape: tuple[int, ...]  # () for a scalar, (length,) for a vector

    def column(self) -> tf.io.FixedLenFeature:
        return tf.io.FixedLenFeature(list(self.shape), self.dtype)


def parse_features(spec: str, arg: str = "features") -> list[Feature]:
    """Parse a features spec: comma-separated `name:dtype[:length]` entries.

    dtype is one of float32, int64, string. Without a length the feature is a scalar (shape
    ()); with one it is a vector of that many values (shape (length,), even for 1). Spaces
    around entries and parts are ignored. Names must be distinct.
    """
    where = f"--input-arg {arg}={spec}"
    if not isinstance(spec, str) or not spec.strip():
        raise UsageError(f"{where}: no features: give {GRAMMAR}")
    parsed: list[Feature] = []
    for entry in spec.split(","):
        entry = entry.strip()
        parts = [p.strip() for p in entry.split(":")]
        if len(parts) not in (2, 3) or not parts[0]:
            raise UsageError(f"{where}: {entry!r} is not name:dtype[:length] ({GRAMMAR})")
        name, dtype = parts[0], parts[1]
        if dtype not in DTYPES:
            raise UsageError(
                f"{where}: unknown dtype {dtype!r} in {entry!r} (one of {', '.join(DTYPES)})"
            )
        shape: tuple[int, ...] = ()
        if len(parts) == 3:
            length = parts[2]
            if not (length.isdecimal() and int(length) > 0):
                raise UsageError(
                    f"{where}: length {length!r} in {entry!r} is not a positive integer"
                )
            shape = (int(length),)
        if any(f.name == name for f in parsed):
            raise UsageError(f"{where}: feature {name!r} is declared twice")
        parsed.append(Feature(name, DTYPES[dtype], shape))
    return parsed


def _split_label(spec: str, features: list[Feature], label: str) -> tuple[list[Feature], Feature]:
    """The features other than the label, and the label: a name declared in `features`, or an
    entry of its own, `name:dtype[:length]`."""
    if ":" in label:
        entries = parse_features(label, arg="label")
        if len(entries) != 1:
            raise UsageError(f"--input-arg label={label}: one name:dtype[:length], not several")
        declared = entries[0]
        if any(f.name == declared.name for f in features):
            raise UsageError(
                f"--input-arg label={label}: {declared.name!r} is also in features={spec}: "
                "declare it in one place"
            )
        rest = features
    else:
        found = [f for f in features if f.name == label]
        if not found:
            raise UsageError(
                f"--input-arg label={label}: no {label!r} in features={spec}: declare it there "
                "(e.g. label:int64) or give label=name:dtype[:length]"
            )
        declared, rest = found[0], [f for f in features if f.name != label]
    if not rest:
        raise UsageError(f"--input-arg features={spec}: declares only the label {label!r}")
    return rest, declared


def _check_batching(batch_size: int, shuffle: int) -> None:
    if not isinstance(batch_size, int) or batch_size < 1:
        raise UsageError(f"batch size {batch_size!r}: it must be a positive integer")
    if not isinstance(shuffle, int) or shuffle < 0:
        raise UsageError(
            f"--input-arg shuffle={shuffle}: a buffer of examples, 0 or a positive integer"
        )


def _batches(
    records: tf.data.Dataset,
    batch_size: int,
    shuffle: int,
    seed: int | None,
    parse: Callable[[tf.Tensor], tuple[object, tf.Tensor]],
) -> tf.data.Dataset:
    """Shuffled, repeated forever, batched whole, parsed a batch at a time, prefetched."""
    if shuffle > 0:
        records = records.shuffle(shuffle, seed=seed, reshuffle_each_iteration=True)
    batches = records.repeat().batch(batch_size, drop_remainder=True)
    return batches.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def tfrecords(
    ctx: tf.distribute.InputContext,
    *,
    batch_size: int,
    data_dir: str,
    features: str,
    label: str = "label",
    pattern: str = "*.tfrecord*",
    compression: str = "",
    shuffle: int = 10_000,
    seed: int | None = None,
) -> tf.data.Dataset:
    """(features, labels) batches from TFRecord files of serialized `tf.train.Example`.

    `features` is a spec (see `parse_features`); `label` names one of its entries, or is an
    entry of its own (`name:dtype[:length]`). Features come as a dict by name, or the one
    tensor when there is one feature. `compression` is "", "GZIP" or "ZLIB".
    """
    declared = parse_features(features)
    inputs, target = _split_label(features, declared, label)
    kind = compression.upper() if isinstance(compression, str) else compression
    if kind not in COMPRESSIONS:
        raise UsageError(f"--input-arg compression={compression}: one of '' (none), GZIP, ZLIB")
    _check_batching(batch_size, shuffle)
    spec = {f.name: f.column() for f in [*inputs, target]}

    def read(names: tf.data.Dataset) -> tf.data.Dataset:
        return tf.data.TFRecordDataset(names, compression_type=kind)

    def parse(serialized: tf.Tensor) -> tuple[object, tf.Tensor]:
        parsed = tf.io.parse_example(serialized, spec)
        x = {f.name: parsed[f.name] for f in inputs}
        return (x[inputs[0].name] if len(inputs) == 1 else x), parsed[target.name]

    records = sharded(ctx, files(data_dir, pattern), read, seed=seed)
    return _batches(records, batch_size, shuffle, seed, parse)


def header(path: str) -> list[str]:
    """The column names in the first line of the CSV file at `path`."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        row = next(csvlib.reader(f), None)
    if not row:
        raise UsageError(f"{path}: no header row (the first line names the columns)")
    return [name.strip() for name in row]


def csv(
    ctx: tf.distribute.InputContext,
    *,
    batch_size: int,
    data_dir: str,
    label: str = "label",
    label_dtype: str = "float32",
    pattern: str = "*.csv",
    shuffle: int = 10_000,
    seed: int | None = None,
) -> tf.data.Dataset:
    """(features, labels) batches from CSV files with a header row.

    Every column but `label` is a float32 feature; they come stacked into one tensor of shape
    (batch, columns) in header order. Labels are `label_dtype`: float32, int32 or int64. Every
    file must have the same header; every field must hold a value.
    """
    paths = files(data_dir, pattern)
    if label_dtype not in CSV_LABEL_DTYPES:
        raise UsageError(
            f"--input-arg label_dtype={label_dtype}: one of {', '.join(CSV_LABEL_DTYPES)}"
        )
    _check_batching(batch_size, shuffle)
    columns = header(paths[0])
    for path in paths[1:]:
        other = header(path)
        if other != columns:
            raise UsageError(
                f"CSV header of {path} ({','.join(other)}) differs from {paths[0]} "
                f"({','.join(columns)}): every file needs the same columns"
            )
    if label not in columns:
        raise UsageError(
            f"--input-arg label={label}: no such column in {paths[0]} (columns: "
            f"{','.join(columns)})"
        )
    at = columns.index(label)
    if len(columns) < 2:
        raise UsageError(f"{paths[0]}: no feature columns besides the label {label!r}")
    # Empty defaults make every field required: a missing value fails rather than reads as 0.
    defaults = [tf.constant([], tf.float32)] * len(columns)
    defaults[at] = tf.constant([], CSV_LABEL_DTYPES[label_dtype])

    def read(names: tf.data.Dataset) -> tf.data.Dataset:
        lines = tf.data.TextLineDataset(names).skip(1)
        return lines.filter(lambda line: tf.strings.length(line) > 0)

    def parse(lines: tf.Tensor) -> tuple[object, tf.Tensor]:
        fields = tf.io.decode_csv(lines, record_defaults=defaults)
        x = tf.stack([v for i, v in enumerate(fields) if i != at], axis=1)
        return x, fields[at]

    records = sharded(ctx, paths, read, seed=seed)
    return _batches(records, batch_size, shuffle, seed, parse)
