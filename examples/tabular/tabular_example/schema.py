"""The record layout, shared by the writer (`generate`) and the reader (`data`)."""

from __future__ import annotations

FEATURES = "features"  # float list, one value per column
TARGET = "target"  # float
COLUMNS = 8
TRAIN_PATTERN = "train-*.tfrecord"
EVAL_PATTERN = "eval-*.tfrecord"
