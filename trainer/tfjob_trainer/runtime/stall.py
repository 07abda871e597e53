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

The chief can also wait on such a connection with the GIL held, where no thread of its own
runs: each new function TensorFlow traces (every checkpoint save under parameter servers
traces one) is registered on every task, the lost one too, and the call does not return. So
the watchdog's thread also sends a pulse to the task's supervisor (`PULSE`), a process outside
TensorFlow; when the pulse stops as long while every peer accepts connections, the supervisor
ends the task the same way (`Frozen`).
"""

from __future__ import annotations

import json
import logging
import os
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


def leaving(what: str) -> str:
    """The line a chief leaves with once `what` ("no training closure has finished for 30s")
    although every peer answers."""
    return (
        f"{what} although every peer accepts connections: the chief waits on a connection to "
        "a peer that was replaced (its node lost?); leaving, so that the restart resumes from "
        "the newest checkpoint with fresh connections"
    )


class Patience:
    """Whether a wait without progress has lasted `limit` while every peer in `addresses`
    accepts connections (counted from when they all do: a peer still away may be replaced)."""

    def __init__(self, addresses: Iterable[str], reachable: Callable[[str], bool]) -> None:
        self.addresses = sorted(addresses)
        self.reachable = reachable
        self.reachable_since: float | None = None

    def reset(self) -> None:
        self.reachable_since = None

    def exhausted(self, now: float, last_progress: float, limit: float) -> bool:
        if now - last_progress < limit:
            return False
        if not all(self.reachable(a) for a in self.addresses):
            self.reachable_since = None
            return False
        if self.reachable_since is None:
            self.reachable_since = now
        return now - max(last_progress, self.reachable_since) >= limit


class Pulse:
    """The heartbeat a task sends its supervisor through a pipe: one JSON line per beat with
    the stall limit (and, first, the peers to check)."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.told_peers = False

    def report_to(self, fd: int) -> None:
        self.fd = fd

    def beat(self, limit: float, peers: list[str]) -> None:
        if self.fd is None:
            return
        message: dict[str, Any] = {"limit": limit}
        if not self.told_peers:
            message["peers"], self.told_peers = peers, True
        try:
            os.write(self.fd, json.dumps(message).encode() + b"\n")
        except OSError:
            self.fd = None  # the supervisor is gone: this task goes with it (PDEATHSIG)


PULSE = Pulse()


class Frozen:
    """The supervisor's side of the pulse: the message to end the task with, once no beat has
    come for the task's limit (at least a few beats' interval) while every peer accepts
    connections; None before the first beat (the task has no watchdog) and while it beats."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        reachable: Callable[[str], bool] = accepts,
    ) -> None:
        self.clock, self.reachable = clock, reachable
        self.buffer = b""
        self.last_beat: float | None = None
        self.limit = 0.0
        self.patience = Patience([], reachable)

    def feed(self, data: bytes) -> None:
        *lines, self.buffer = (self.buffer + data).split(b"\n")
        for line in lines:
            message = json.loads(line)
            self.limit = max(float(message["limit"]), 3 * CHECK_SECONDS)
            if "peers" in message:
                self.patience = Patience(message["peers"], self.reachable)
        if lines:
            self.last_beat = self.clock()
            self.patience.reset()

    def check(self) -> str | None:
        if self.last_beat is None:
            return None
        now = self.clock()
        if not self.patience.exhausted(now, self.last_beat, self.limit):
            return None
        return leaving(
            f"no thread has run for {now - self.last_beat:.0f}s (held inside TensorFlow)"
        )


class Watchdog(threading.Thread):
    """Calls `on_stall(message)` once no closure has finished for `seconds` while every peer
    in `addresses` accepts connections (counted from when they all do). Its thread beats
    `PULSE` until the process ends."""

    def __init__(
        self,
        addresses: Iterable[str],
        seconds: float,
        on_stall: Callable[[str], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        reachable: Callable[[str], bool] = accepts,
        done: Callable[[Any], bool | None] = finished,
        pulse: Pulse = PULSE,
    ) -> None:
        super().__init__(name="tfjob-stall-watchdog", daemon=True)
        self.patience = Patience(addresses, reachable)
        self.seconds = seconds
        self.on_stall = on_stall
        self.clock, self.done, self.pulse = clock, done, pulse
        self.pending: list[Any] = []
        self.lock = threading.Lock()
        self.last_progress = clock()
        self.longest_gap = 0.0
        self.blind = False  # this TensorFlow does not say when a closure has finished
        self.stopped = threading.Event()

    def scheduled(self, remote: Any) -> None:
        with self.lock:
            self.pending.append(remote)

    def stop(self) -> None:
        """No more closures to watch; the pulse goes on (a save or export can still hang)."""
        self.stopped.set()

    def run(self) -> None:
        watching = True
        while True:
            time.sleep(CHECK_SECONDS)
            self.pulse.beat(self.limit(), self.patience.addresses)
            if not watching or self.stopped.is_set():
                continue
            message = self.check()
            if self.blind:
                log.warning("closure status unreadable in this TensorFlow: no stall watchdog")
                watching = False
            elif message:
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
                self.last_progress = now
                self.patience.reset()
                return None
        if not self.patience.exhausted(now, self.last_progress, self.limit()):
            return None
        return leaving(f"no training closure has finished for {now - self.last_progress:.0f}s")
