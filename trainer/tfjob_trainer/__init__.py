"""The TFJob trainer: one TensorFlow program for every task of a distributed job."""

import time

# When this process started, for "time to first step" (TensorFlow's import is most of it).
STARTED = time.perf_counter()


class TaskFailed(RuntimeError):
    """A runtime failure whose message says all there is: one log line, no traceback."""
