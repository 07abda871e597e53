"""A stop on request: SIGTERM (a pod deleted, drained, preempted, suspended or scaled down)
ends a task only once the job's state is saved, at the step it is on.

Until a training loop says it saves (`STOP.defer()`), SIGTERM ends the task at once: nothing
of this task's is lost; where TensorFlow holds the task and no Python runs, its supervisor
ends it (`supervisor`), which `defer` tells that the task now saves. Afterwards the handler
only sets a flag; the loop reads it at its next step boundary, saves, and calls `leave(step)`.
Serving tasks keep serving until the chief, which saves from them, is gone, or until the
pod's grace period nearly ends (`ENV_GRACE_PERIOD`): parameter servers, which hold the
variables, and for a short while the workers of a parameter-server job, whose closures in
flight the chief lets finish.

Every exit on request has code `EXIT_STOPPED` and a termination message naming the step saved,
which the operator reads: no failure under any restart policy.

The handler is installed again where a strategy starts: TensorFlow's coordination service
(MultiWorkerMirroredStrategy) puts a C handler of its own in place of Python's, and then SIGTERM
reached no Python code at all.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any, NoReturn

from tfjob_protocol import stop as protocol

from .exit_codes import exit_now

log = logging.getLogger("tfjob_trainer")

# Leave this much of the grace period for the exit itself and the kubelet's bookkeeping.
GRACE_MARGIN_SECS = 3.0
POLL_SECS = 0.2


class StopRequest:
    """SIGTERM, as this process saw it: when, and whether a loop will save before leaving."""

    def __init__(self) -> None:
        self.at: float | None = None  # time.monotonic() at the signal
        self.saving = False
        self.supervisor: int | None = None  # a pipe to this task's supervisor, if any

    def report_saves_to(self, fd: int) -> None:
        """Tell the supervisor (`supervisor`), through `fd`, once this task saves on a stop."""
        self.supervisor = fd

    def arm(self) -> None:
        """Install the handler (again: see the module's docstring)."""
        signal.signal(signal.SIGTERM, self._handler)

    def defer(self) -> None:
        """From now on SIGTERM only asks: the caller checks `requested` at step boundaries."""
        if not self.saving and self.supervisor is not None:
            os.write(self.supervisor, b"s")
        self.saving = True
        self.arm()

    @property
    def requested(self) -> bool:
        return self.at is not None

    def _handler(self, signum: int, frame: Any) -> None:
        """Sets a plain attribute, not a `threading.Event`: a second SIGTERM (the supervisor
        passes on the one a process group also gave the task) runs this handler again inside
        the first, and would wait forever for the Event's lock that the first one holds
        (logging's locks are reentrant)."""
        if self.at is not None:
            return  # asked already
        self.at = time.monotonic()
        if not self.saving:
            log.info("stopped by %s", signal.Signals(signum).name)
            leave(None)
        log.info("stopped by %s: saving at the next step boundary", signal.Signals(signum).name)

    def deadline(self) -> float | None:
        """When a task waiting for its chief must leave (time.monotonic()); None: no grace
        period known, wait until SIGKILL."""
        grace = os.environ.get(protocol.ENV_GRACE_PERIOD, "")
        if self.at is None or not grace.isdigit():
            return None
        return self.at + max(int(grace) - GRACE_MARGIN_SECS, 0.0)


STOP = StopRequest()


def leave(step: int | None) -> NoReturn:
    """Exit as stopped on request; `step`: the step saved (None: this task saves nothing)."""
    _write_termination_message(protocol.message(step))
    exit_now(protocol.EXIT_STOPPED)


def _write_termination_message(text: str) -> None:
    """Into the container's termination log, where Kubernetes reads it, if there is one: never
    create a file under /dev of a machine outside a container."""
    path = Path(os.environ.get(protocol.ENV_TERMINATION_LOG, protocol.TERMINATION_LOG))
    if not path.exists():
        return
    try:
        path.write_text(text)
    except OSError as e:
        log.warning("cannot write the termination message to %s: %s", path, e)


def wait_for_chief(chief: str | None, linger: float | None = None) -> NoReturn:
    """A serving task asked to stop: serve on until `chief` ("host:port") no longer accepts
    connections (it saved from this task and left, or it is not there), or the grace period
    nearly ends, or `linger` seconds have passed; then leave."""
    deadline = STOP.deadline()
    if linger is not None and STOP.at is not None:
        deadline = min(deadline or math.inf, STOP.at + linger)
    while chief is not None and _accepts(chief):
        if deadline is not None and time.monotonic() >= deadline:
            log.info("the chief is still up; leaving")
            break
        time.sleep(POLL_SECS)
    leave(None)


def _accepts(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False
