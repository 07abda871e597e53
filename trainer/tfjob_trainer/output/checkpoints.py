"""TF2 checkpoints: the step counter, model and optimizer, kept by a CheckpointManager.

One writer at a time: the task that writes the job's checkpoint directory claims it when it
starts (`WRITER_FILE`), and checks the claim before each save. A pod whose node stopped
answering is replaced while it may still run (cut off, not dead); its successor's claim makes
it stop at its next save instead of writing over the successor's checkpoints.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from pathlib import Path

import keras
import tensorflow as tf

from .. import TaskFailed

log = logging.getLogger(__name__)

WRITER_FILE = ".tfjob-writer"


def claim(directory: Path) -> str:
    """Make this process the directory's writer; return the token that says so."""
    token = f"{socket.gethostname()} {os.getpid()} {uuid.uuid4().hex}"
    directory.mkdir(parents=True, exist_ok=True)
    staged = directory / f"{WRITER_FILE}.{uuid.uuid4().hex}"
    staged.write_text(token)
    os.replace(staged, directory / WRITER_FILE)  # atomic: a reader sees one claim or the other
    return token


def check_claim(directory: Path, token: str) -> None:
    """Raise TaskFailed when another process has claimed the directory since `token`."""
    try:
        holder = (directory / WRITER_FILE).read_text()
    except FileNotFoundError:
        return  # the directory was emptied by hand: nobody else claims it
    if holder != token:
        raise TaskFailed(
            f"{holder.split(' ')[0]} took over the checkpoint directory {directory}; this task "
            "stops without saving (its pod was replaced, e.g. after its node stopped "
            "answering, or another job writes the same directory)"
        )


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
        writer: bool = False,
    ) -> None:
        self.options = tf.train.CheckpointOptions(experimental_io_device=io_device)
        self.checkpoint = tf.train.Checkpoint(step=step, model=model, optimizer=optimizer)
        self.manager = tf.train.CheckpointManager(
            self.checkpoint, str(directory), max_to_keep=max_to_keep
        )
        self.step = step
        self.directory = directory
        # The job's own directory (not a worker's scratch copy): claimed, and checked at saves.
        self.token = claim(directory) if writer else None

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
        if self.token is not None:
            check_claim(self.directory, self.token)
        path: str = self.manager.save(checkpoint_number=step, options=self.options)
        log.info("saved %s at step %d", path, step)
        return path

    @property
    def latest(self) -> str:
        """The newest checkpoint's path, "" before the first save (as the result line has it)."""
        return str(self.manager.latest_checkpoint or "")
