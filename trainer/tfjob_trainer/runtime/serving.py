"""How a server task (a parameter server, a parameter-server worker) waits: until it is stopped.

`tf.distribute.Server.join()` blocks inside TensorFlow, where Python never runs a signal
handler, and in a container the trainer is PID 1, which the kernel gives no default action for
SIGTERM: a deleted or scaled-down pod then waited out its whole grace period before SIGKILL.
Waiting in Python instead lets the SIGTERM handler run, and the task then serves on only while
its chief saves from it (`stopping.wait_for_chief`).

The wait reads a pipe that Python's signal wakeup writes to. `signal.pause()` would not do:
the kernel may deliver the signal to one of TensorFlow's threads, and then the main thread's
`pause()` never returns, so the handler never runs.
"""

from __future__ import annotations

import os
import signal
from typing import Any, NoReturn

from .stopping import STOP, wait_for_chief


def serve_until_stopped(server: Any, chief: str | None, linger: float | None = None) -> NoReturn:
    """Keep `server` (its threads do the work) until SIGTERM, then until `chief` ("host:port",
    the task that saves the variables this one holds; None: nobody) is gone, for at most
    `linger` seconds (None: the grace period)."""
    STOP.defer()
    wake, woken = os.pipe()
    os.set_blocking(woken, False)
    signal.set_wakeup_fd(woken)  # any thread's signal writes a byte here
    while server is not None:
        os.read(wake, 1)  # back in Python: the pending handler runs now
        if STOP.requested:
            wait_for_chief(chief, linger)
    raise AssertionError("unreachable")
