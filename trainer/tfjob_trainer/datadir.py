"""`tfjob_trainer.datadir`, the path users' input functions import (`from tfjob_trainer import
datadir`) and `--input` names (`tfjob_trainer.datadir:tfrecords`, `:csv`): the helpers live in
`data.file_inputs`, with the rest of what a task reads; this keeps their public path."""

from .data.file_inputs import (
    COMPRESSIONS,
    CSV_LABEL_DTYPES,
    DTYPES,
    GRAMMAR,
    Feature,
    csv,
    files,
    header,
    parse_features,
    sharded,
    tfrecords,
)

__all__ = [
    "COMPRESSIONS",
    "CSV_LABEL_DTYPES",
    "DTYPES",
    "GRAMMAR",
    "Feature",
    "csv",
    "files",
    "header",
    "parse_features",
    "sharded",
    "tfrecords",
]
