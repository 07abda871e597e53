"""A coordinator waiting on a connection that will never answer.

Under parameter servers the chief waits for each closure's answer on its worker's gRPC
connection. A worker (or parameter server) whose node died or was cut off neither answers nor
closes the connection: the kernel keeps it open for about fifteen minutes of retransmissions.
When the pod is made again on another node it answers at the same name, but the chief still
waits on the old connection, and the job hangs. (gRPC keepalive would notice, but TensorFlow's
servers keep gRPC's default ping policy, which closes a connection that pings while idle: the
parameter servers' connections, idle exactly while the chief waits.)

`Watchdog` tells that case apart from slow steps and from a peer that is still being replaced:
no closure has finished for `seconds` although every peer accepts connections again. The chief
then leaves with the peer-lost exit code, and its restart resumes from the newest checkpoint
with fresh connections.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)

CHECK_SECONDS = 2.0
CONNECT_SECONDS = 1.0


def accepts(address: str) -> bool:
    """Whether `host:port` resolves and accepts a TCP connection now."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS):
            return True
    except OSError:
        return False


def finished(remote: Any) -> bool | None:
    """Whether a scheduled closure has finished (its result or error is in); None when this
    TensorFlow's RemoteValue does not say (then the watchdog stays off)."""
    status = getattr(remote, "_status", None)
    if status is None:
        return None
    return getattr(status, "name", "") != "NOT_READY"


class Watchdog(threading.Thread):
    """Calls `on_stall(message)` once no closure has finished for `seconds` while every peer
    in `addresses` accepts connections (counted from when they all do)."""

    def __init__(
        self,
        addresses: Iterable[str],
        seconds: float,
        on_stall: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        reachable: Callable[[str], bool] = accepts,
        done: Callable[[Any], bool | None] = finished,
    ) -> None:
        super().__init__(name="tfjob-stall-watchdog", daemon=True)
        self.addresses = sorted(addresses)
        self.seconds = seconds
        self.on_stall = on_stall
        self.clock, self.reachable, self.done = clock, reachable, done
        self.pending: list[Any] = []
        self.lock = threading.Lock()
        self.last_progress = clock()
        self.reachable_since: float | None = None
        self.longest_gap = 0.0
        self.blind = False  # this TensorFlow does not say when a closure has finished
        self.stopped = threading.Event()

    def scheduled(self, remote: Any) -> None:
        with self.lock:
            self.pending.append(remote)

    def stop(self) -> None:
        self.stopped.set()

    def run(self) -> None:
        while not self.stopped.wait(CHECK_SECONDS):
            message = self.check()
            if self.blind:
                log.warning("closure status unreadable in this TensorFlow: no stall watchdog")
                return
            if message:
                self.on_stall(message)
                return

    def limit(self) -> float:
        """How long a stall may last: `seconds`, or five times the longest wait between two
        finished closures seen so far (a model whose closures take minutes is not stalled)."""
        return max(self.seconds, 5 * self.longest_gap)

    def check(self) -> str | None:
        """One look: the message to leave with, or None to go on."""
        now = self.clock()
        with self.lock:
            states = [self.done(r) for r in self.pending]
            if any(s is None for s in states):
                self.blind = True
                return None
            before = len(self.pending)
            self.pending = [r for r, s in zip(self.pending, states, strict=True) if not s]
            if len(self.pending) < before or not self.pending:
                if len(self.pending) < before:
                    self.longest_gap = max(self.longest_gap, now - self.last_progress)
                self.last_progress, self.reachable_since = now, None
                return None
        limit = self.limit()
        if now - self.last_progress < limit:
            return None
        if not all(self.reachable(a) for a in self.addresses):
            self.reachable_since = None  # a peer is still away: its replacement may come
            return None
        if self.reachable_since is None:
            self.reachable_since = now
        if now - max(self.last_progress, self.reachable_since) < limit:
            return None
        return (
            f"no training closure has finished for {now - self.last_progress:.0f}s although "
            "every peer accepts connections: the chief waits on a connection to a peer that "
            "was replaced (its node lost?); leaving, so that the restart resumes from the "
            "newest checkpoint with fresh connections"
        )
