"""The TFJob trainer: one TensorFlow program for every task of a distributed job."""

import time

# When this process started, for "time to first step" (TensorFlow's import is most of it).
STARTED = time.perf_counter()


class TaskFailed(RuntimeError):
    """A runtime failure whose message says all there is: one log line, no traceback."""


class UsageError(ValueError):
    """A mistake in what the user gave the trainer (a flag, a plug-in function, the data it
    reads): the process exits 2 with this one line, which names what to fix."""
