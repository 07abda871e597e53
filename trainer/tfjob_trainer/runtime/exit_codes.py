"""How the trainer leaves: its exit codes, and leaving at once."""

from __future__ import annotations

import logging
import os
import sys
from typing import NoReturn

EXIT_CONFIG = 2
# A peer was lost: the cluster failed, not the program. At 128 or above, as a signal's exit
# is, so that `restartPolicy: ExitCode` restarts the task instead of failing the job.
EXIT_PEER_LOST = 200


def exit_now(code: int) -> NoReturn:
    """Leave without tearing TensorFlow down. Its distributed runtime can take many seconds to
    stop threads and free remote resources at a parameter-server chief's exit, while the job's
    success waits on that exit. Checkpoints, export, summaries and the result line are
    written and flushed by now; what is left dies with the process anyway."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
