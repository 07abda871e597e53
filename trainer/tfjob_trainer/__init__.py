"""The TFJob trainer: one TensorFlow program for every task of a distributed job."""

import time

# When this process started, for "time to first step" (TensorFlow's import is most of it).
STARTED = time.perf_counter()
