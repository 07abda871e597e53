"""Input functions for data on a volume: every input pipeline reads its own share, the
TFRecord and CSV readers give back what was written, and every mistake is one line."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfjob_trainer import UsageError
from tfjob_trainer.data import file_inputs


def context(pipelines: int = 2, index: int = 0) -> tf.distribute.InputContext:
    return tf.distribute.InputContext(
        num_input_pipelines=pipelines, input_pipeline_id=index, num_replicas_in_sync=pipelines
    )


def example(i: int) -> bytes:
    """Example i: id i, x = i * (1, 2, 3), name "n<i>", label i % 3."""
    feature = {
        "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=[i * 1.0, i * 2.0, i * 3.0])),
        "name": tf.train.Feature(bytes_list=tf.train.BytesList(value=[f"n{i}".encode()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 3])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_tfrecords(
    directory: Path, n_files: int, per_file: int, compression: str = "", suffix: str = ""
) -> list[int]:
    """`n_files` files of `per_file` examples with consecutive ids; the ids."""
    directory.mkdir(parents=True, exist_ok=True)
    options = tf.io.TFRecordOptions(compression_type=compression)
    for f in range(n_files):
        path = directory / f"part-{f:02d}.tfrecord{suffix}"
        with tf.io.TFRecordWriter(str(path), options) as writer:
            for i in range(f * per_file, (f + 1) * per_file):
                writer.write(example(i))
    return list(range(n_files * per_file))


def ids(records: tf.data.Dataset) -> list[int]:
    spec = {"id": tf.io.FixedLenFeature([], tf.int64)}
    parsed = records.map(lambda r: tf.io.parse_single_example(r, spec)["id"])
    return [int(i) for i in parsed.as_numpy_iterator()]


@pytest.mark.parametrize(
    ("n_files", "pipelines", "by"),
    [
        (4, 2, "file"),
        (5, 2, "file"),  # uneven: 3 files and 2
        (1, 2, "example"),
        (3, 4, "example"),
    ],
)
def test_every_pipeline_reads_its_own_share_and_together_all(
    tmp_path, caplog, n_files, pipelines, by
):
    per_file = 6
    everything = write_tfrecords(tmp_path, n_files, per_file)
    paths = file_inputs.files(tmp_path, "*.tfrecord")
    caplog.set_level(logging.INFO, logger="tfjob_trainer.data.file_inputs")
    shares = [
        ids(file_inputs.sharded(context(pipelines, i), paths, tf.data.TFRecordDataset, seed=1))
        for i in range(pipelines)
    ]
    seen = [i for share in shares for i in share]
    assert sorted(seen) == everything, "disjoint and complete"
    assert all(share for share in shares), "no pipeline goes without"
    if by == "file":  # whole files, each in one pipeline: pipeline i has files i, i + n, ...
        for i, share in enumerate(shares):
            assert {r // per_file for r in share} == set(range(i, n_files, pipelines))
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == pipelines
    assert f"{n_files} file" in messages[0] and f"{pipelines} input pipelines" in messages[0]
    assert f"sharding by {by}" in messages[0]


def test_file_order_changes_from_epoch_to_epoch(tmp_path):
    write_tfrecords(tmp_path, 8, 1)
    paths = file_inputs.files(tmp_path, "*.tfrecord")
    epochs = file_inputs.sharded(context(1), paths, tf.data.TFRecordDataset, seed=3).repeat(4)
    order = ids(epochs)
    assert len({tuple(order[e * 8 : (e + 1) * 8]) for e in range(4)}) > 1


def test_files_are_sorted_and_double_star_is_recursive(tmp_path):
    for name in ["b/2.csv", "a/deep/1.csv", "0.csv", "skip.txt"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x\n")
    assert file_inputs.files(str(tmp_path), "**/*.csv") == [
        str(tmp_path / n) for n in ["0.csv", "a/deep/1.csv", "b/2.csv"]
    ]
    assert file_inputs.files(tmp_path, "*.csv") == [str(tmp_path / "0.csv")]


SPEC = "id:int64, x:float32:3, name:string, label:int64"


def check_batch(features: dict, labels: tf.Tensor, batch: int) -> None:
    ids_ = features["id"].numpy()
    assert features["id"].shape == (batch,) and features["id"].dtype == tf.int64
    assert features["x"].shape == (batch, 3) and features["x"].dtype == tf.float32
    assert features["name"].shape == (batch,) and features["name"].dtype == tf.string
    assert labels.shape == (batch,) and labels.dtype == tf.int64
    np.testing.assert_array_equal(features["x"].numpy(), ids_[:, None] * [1.0, 2.0, 3.0])
    assert [n.decode() for n in features["name"].numpy()] == [f"n{i}" for i in ids_]
    np.testing.assert_array_equal(labels.numpy(), ids_ % 3)


@pytest.mark.parametrize(
    ("compression", "suffix"), [("", ""), ("GZIP", ".gz"), ("ZLIB", ".zz"), ("gzip", ".gz")]
)
def test_tfrecords_round_trip_repeating_forever(tmp_path, compression, suffix):
    write_tfrecords(tmp_path, 2, 5, compression.upper(), suffix)
    ds = file_inputs.tfrecords(
        context(2, 1),
        batch_size=2,
        data_dir=str(tmp_path),
        features=SPEC,
        compression=compression,
        shuffle=100,
        seed=0,
    )
    assert "label" not in ds.element_spec[0], "the label is taken out of the features"
    batches = list(ds.take(10))  # 20 examples: pipeline 1's file (ids 5-9) 4 times over
    for features, labels in batches:
        check_batch(features, labels, 2)
    seen = np.concatenate([f["id"].numpy() for f, _ in batches])
    assert sorted(seen) == sorted(list(range(5, 10)) * 4), "each epoch a permutation"
    assert list(seen[:5]) != list(range(5, 10)), "shuffled"


def test_one_feature_comes_alone_and_a_label_may_be_declared_apart(tmp_path):
    write_tfrecords(tmp_path, 1, 4)
    ds = file_inputs.tfrecords(
        context(1),
        batch_size=4,
        data_dir=str(tmp_path),
        features="x:float32:3",
        label="id:int64:1",
        shuffle=0,
    )
    x, y = next(iter(ds))
    assert x.shape == (4, 3) and y.shape == (4, 1), "an explicit length, even 1, is a vector"
    np.testing.assert_array_equal(y.numpy()[:, 0], [0, 1, 2, 3])


def test_with_a_strategy(tmp_path):
    write_tfrecords(tmp_path, 3, 4)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    dist = strategy.distribute_datasets_from_function(
        lambda ctx: file_inputs.tfrecords(ctx, batch_size=3, data_dir=str(tmp_path), features=SPEC)
    )
    features, labels = next(iter(dist))
    check_batch(features, labels, 3)


def write_csv(path: Path, header: str, rows: list[list[float]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([header, *(",".join(str(v) for v in r) for r in rows)]) + "\n")


def test_csv_round_trip(tmp_path):
    # label in the middle: the features keep header order without it.
    for f in range(2):
        rows = [[i, i + 0.5, i % 2, -i] for i in range(f * 4, f * 4 + 4)]
        write_csv(tmp_path / f"{f}.csv", "a, b,y,c", rows)
    (tmp_path / "1.csv").write_text((tmp_path / "1.csv").read_text() + "\n")  # a blank line
    ds = file_inputs.csv(
        context(2, 0), batch_size=3, data_dir=str(tmp_path), label="y", label_dtype="int32"
    )
    batches = list(ds.take(4))  # 12 examples: pipeline 0's file, 3 times
    for x, y in batches:
        assert x.shape == (3, 3) and x.dtype == tf.float32
        assert y.shape == (3,) and y.dtype == tf.int32
        i = x.numpy()[:, 0]
        np.testing.assert_array_equal(x.numpy(), np.stack([i, i + 0.5, -i], axis=1))
        np.testing.assert_array_equal(y.numpy(), i.astype(int) % 2)
    seen = np.concatenate([x.numpy()[:, 0] for x, _ in batches])
    assert sorted(seen) == sorted([0.0, 1.0, 2.0, 3.0] * 3)


def test_csv_labels_are_float32_by_default(tmp_path):
    write_csv(tmp_path / "d.csv", "label,x", [[0.25, 1], [0.75, 2]])
    x, y = next(iter(file_inputs.csv(context(1), batch_size=2, data_dir=str(tmp_path), shuffle=0)))
    assert y.dtype == tf.float32 and sorted(y.numpy()) == [0.25, 0.75] and x.shape == (2, 1)


def tfrecords_with(directory: Path, **kwargs) -> None:
    write_tfrecords(directory, 1, 2)
    args = {"batch_size": 2, "data_dir": str(directory), "features": SPEC, **kwargs}
    file_inputs.tfrecords(context(1), **args)


def csv_with(directory: Path, second_header: str = "a,b,label", **kwargs) -> None:
    write_csv(directory / "1.csv", "a,b,label", [[1, 2, 3]])
    write_csv(directory / "2.csv", second_header, [[1, 2, 3]])
    file_inputs.csv(context(1), batch_size=1, data_dir=str(directory), **kwargs)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda d: file_inputs.files(None, "*.csv"),
            "--data-dir (TFJOB_DATA_DIR) is not set: give the directory that holds the input "
            "files ('*.csv')",
        ),
        (
            lambda d: file_inputs.files("", "*.csv"),
            "--data-dir (TFJOB_DATA_DIR) is not set: give the directory that holds the input "
            "files ('*.csv')",
        ),
        (lambda d: file_inputs.files(d / "nope", "*.csv"), "--data-dir {d}/nope does not exist"),
        (
            lambda d: file_inputs.files(d, "*.parquet"),
            "no file under --data-dir {d} matches '*.parquet'",
        ),
        (
            lambda d: tfrecords_with(d, features="x:flot32:8"),
            "--input-arg features=x:flot32:8: unknown dtype 'flot32' in 'x:flot32:8' "
            "(one of float32, int64, string)",
        ),
        (
            lambda d: tfrecords_with(d, features="x:float32:eight,label:int64"),
            "--input-arg features=x:float32:eight,label:int64: length 'eight' in "
            "'x:float32:eight' is not a positive integer",
        ),
        (
            lambda d: tfrecords_with(d, features="x,label:int64"),
            "--input-arg features=x,label:int64: 'x' is not name:dtype[:length] "
            "(name:dtype[:length],... e.g. x:float32:8,label:int64)",
        ),
        (
            lambda d: tfrecords_with(d, features="x:float32,x:int64"),
            "--input-arg features=x:float32,x:int64: feature 'x' is declared twice",
        ),
        (
            lambda d: tfrecords_with(d, features="x:float32:3"),
            "--input-arg label=label: no 'label' in features=x:float32:3: declare it there "
            "(e.g. label:int64) or give label=name:dtype[:length]",
        ),
        (
            lambda d: tfrecords_with(d, features="label:int64"),
            "--input-arg features=label:int64: declares only the label 'label'",
        ),
        (
            lambda d: tfrecords_with(d, compression="gz"),
            "--input-arg compression=gz: one of '' (none), GZIP, ZLIB",
        ),
        (
            lambda d: csv_with(d, second_header="a,c,label"),
            "CSV header of {d}/2.csv (a,c,label) differs from {d}/1.csv (a,b,label): "
            "every file needs the same columns",
        ),
        (
            lambda d: csv_with(d, label="y"),
            "--input-arg label=y: no such column in {d}/1.csv (columns: a,b,label)",
        ),
        (
            lambda d: csv_with(d, label_dtype="int8"),
            "--input-arg label_dtype=int8: one of float32, int32, int64",
        ),
    ],
    ids=[
        "unset",
        "empty",
        "missing dir",
        "no match",
        "bad dtype",
        "bad length",
        "no dtype",
        "twice",
        "no label",
        "only label",
        "compression",
        "csv header",
        "csv label",
        "csv label dtype",
    ],
)
def test_each_mistake_is_one_line_naming_what_to_fix(tmp_path, call, message):
    with pytest.raises(UsageError) as e:
        call(tmp_path)
    assert "\n" not in str(e.value)
    assert str(e.value) == message.format(d=tmp_path)
