"""TF2 checkpoints: the step counter, model and optimizer, kept by a CheckpointManager."""

from __future__ import annotations

import logging
from pathlib import Path

import keras
import tensorflow as tf

log = logging.getLogger(__name__)


class Checkpoints:
    """The step counter, model and optimizer, in a CheckpointManager directory.

    `io_device` names the one task that reads and writes the files. Without it, TensorFlow
    saves each variable's shard from the task that holds it: under parameter servers, the ps
    tasks, which have no checkpoint volume (a TFJob mounts it everywhere but on them).
    """

    def __init__(
        self,
        directory: Path,
        step: tf.Variable,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        max_to_keep: int = 3,
        io_device: str | None = None,
    ) -> None:
        self.options = tf.train.CheckpointOptions(experimental_io_device=io_device)
        self.checkpoint = tf.train.Checkpoint(step=step, model=model, optimizer=optimizer)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(directory), max_to_keep=max_to_keep
        )
        self.step = step

    def restore(self, latest: str | None = None) -> int:
        """Restore the newest checkpoint; return the step to continue from."""
        path = latest or self.manager.latest_checkpoint
        if path:
            self.checkpoint.restore(path, options=self.options).expect_partial()
            log.info("restored %s at step %d", path, int(self.step.numpy()))
        return int(self.step.numpy())

    def save(self) -> str:
        """Save at the current step; the log line names the checkpoint, for whoever follows
        the job from its logs (a restart's `restored` line names one of these)."""
        step = int(self.step.numpy())
        path = self.manager.save(checkpoint_number=step, options=self.options)
        log.info("saved %s at step %d", path, step)
        return path

    @property
    def latest(self) -> str:
        """The newest checkpoint's path, "" before the first save (as the result line has it)."""
        return str(self.manager.latest_checkpoint or "")
