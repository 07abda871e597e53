"""One writer per checkpoint directory: a task that was replaced while it still ran (its node
cut off) stops at its next save instead of writing over its successor's checkpoints."""

from __future__ import annotations

import keras
import pytest
import tensorflow as tf

from tfjob_trainer import TaskFailed
from tfjob_trainer.output.checkpoints import WRITER_FILE, Checkpoints


def checkpoints(directory, writer=True):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    step = tf.Variable(0, dtype=tf.int64)
    return Checkpoints(directory, step, model, keras.optimizers.SGD(), writer=writer)


def test_a_successor_takes_the_directory_over_and_the_old_writer_stops(tmp_path):
    old = checkpoints(tmp_path)
    old.step.assign(10)
    first = old.save()
    new = checkpoints(tmp_path)
    assert new.restore() == 10
    new.step.assign(20)
    newest = new.save()
    old.step.assign(30)
    with pytest.raises(TaskFailed, match="took over the checkpoint directory"):
        old.save()
    assert tf.train.latest_checkpoint(str(tmp_path)) == newest != first
    assert checkpoints(tmp_path).restore() == 20


def test_a_scratch_copy_claims_nothing(tmp_path):
    mine = checkpoints(tmp_path)
    checkpoints(tmp_path, writer=False).save()  # a worker's own copy, saved collectively
    mine.save()
    assert (tmp_path / WRITER_FILE).read_text() == mine.token
