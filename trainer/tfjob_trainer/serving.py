"""How a server task (a parameter server, a parameter-server worker) waits: until it is stopped.

`tf.distribute.Server.join()` blocks inside TensorFlow, where Python never runs a signal
handler, and in a container the trainer is PID 1, which the kernel gives no default action for
SIGTERM: a deleted or scaled-down pod then waited out its whole grace period (30 s) before
SIGKILL. Waiting in Python instead lets the SIGTERM handler of `__main__` end the task at once.
"""

from __future__ import annotations

import signal
from typing import Any, NoReturn


def serve_until_stopped(server: Any) -> NoReturn:
    """Keep `server` (its threads do the work) until a signal ends the process."""
    while server is not None:
        signal.pause()
    raise AssertionError("unreachable")
