"""TensorFlow's inter-op threads when a task may run on one CPU only.

TensorFlow sizes its inter-op pool by the CPUs the process may run on. On one CPU (a pod with
an exclusive core under the kubelet's static CPU manager, or `taskset`) that is a single
thread, and a parameter-server worker then hangs in its first closure: the one thread blocks
in a receive from the parameter server while the op that would complete it waits for a thread
(seen with the CNN and a worker pinned to one core). Two threads are enough to go on. A single
process with no cluster waits on no peer: it keeps TensorFlow's choice, which runs its small ops
faster on one CPU (benchmarks/README.md).
"""

from __future__ import annotations

import os

import tensorflow as tf

MIN_INTER_OP = 2


def inter_op_threads(clustered: bool = True) -> int:
    """0 (TensorFlow's own choice, one per CPU) unless this task talks to peers and fewer than
    MIN_INTER_OP CPUs are ours."""
    if not clustered or len(os.sched_getaffinity(0)) >= MIN_INTER_OP:
        return 0
    return MIN_INTER_OP


def configure(clustered: bool = True) -> None:
    """Set the eager context's pool; call before TensorFlow runs its first op. `clustered`:
    the task has peers (TF_CONFIG)."""
    if inter_op_threads(clustered):
        tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads(clustered))


def server_config() -> tf.compat.v1.ConfigProto:
    """The ConfigProto a tf.distribute.Server or tf.compat.v1.train.Server should start with."""
    return tf.compat.v1.ConfigProto(inter_op_parallelism_threads=inter_op_threads())
