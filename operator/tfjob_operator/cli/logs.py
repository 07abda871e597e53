"""`tfjob logs [--follow]`: the logs of a job's replicas, each line prefixed with its replica
(as `tfjob run` prints them); the streams that `submit --follow` reads too."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

import urllib3

from tfjob_operator.api.spec import KIND
from tfjob_operator.cli.connection import CliError, Connection, replica_of
from tfjob_operator.cli.printing import line_prefix
from tfjob_protocol.result import Result, parse_last


def logs(cluster: Connection, name: str, replica: str | None, follow: bool, out: TextIO) -> int:
    cluster.job(name)  # not found: one clear line
    pods = cluster.pods(name)
    if replica is not None:
        pods = [p for p in pods if replica_of(p.metadata.name, name) == replica]
        if not pods:
            known = ", ".join(replica_of(p.metadata.name, name) for p in cluster.pods(name))
            raise CliError(
                f"{KIND} {name} has no running replica {replica} (has: {known or 'none'})"
            )
    if not pods:
        raise CliError(f"{KIND} {name} has no pods now (a finished job's pods are scaled down)")
    printer = Printer(out, colour=out.isatty())
    streams = [
        LogStream(cluster, p.metadata.name, replica_of(p.metadata.name, name), i, printer)
        for i, p in enumerate(pods)
    ]
    if not follow:
        for s in streams:
            s.dump()
        return 0
    threads = [threading.Thread(target=s.follow, daemon=True) for s in streams]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 0


@dataclass
class Printer:
    """Prefixed lines from several threads, whole lines only."""

    out: TextIO
    colour: bool
    lock: threading.Lock = field(default_factory=threading.Lock)

    def line(self, prefix: str, text: str) -> None:
        with self.lock:
            self.out.write(prefix + text + "\n")
            self.out.flush()


@dataclass
class LogStream:
    """One pod's log, prefixed with its replica; remembers the trainer's result line."""

    cluster: Connection
    pod: str
    replica: str
    index: int
    printer: Printer
    result: Result | None = None

    @property
    def prefix(self) -> str:
        return line_prefix(self.replica, self.index, self.printer.colour)

    def _emit(self, text: str) -> None:
        if (r := parse_last(text)) is not None:
            self.result = r
        self.printer.line(self.prefix, text)

    def dump(self) -> None:
        text = self.cluster.call(
            f"read the log of {self.pod}",
            self.cluster.core.read_namespaced_pod_log,
            self.pod,
            self.cluster.namespace,
        )
        for line in text.splitlines():
            self._emit(line)

    def follow(self) -> None:
        """Stream the log until the container ends (or its pod goes)."""
        with contextlib.suppress(CliError, urllib3.exceptions.HTTPError, OSError):
            response = self.cluster.call(
                f"follow the log of {self.pod}",
                self.cluster.core.read_namespaced_pod_log,
                self.pod,
                self.cluster.namespace,
                follow=True,
                _preload_content=False,
                _request_timeout=None,
            )
            for raw in _lines(response):
                self._emit(raw)


def _lines(response: Any) -> Iterator[str]:
    pending = b""
    for chunk in response.stream(4096):
        pending += chunk
        *whole, pending = pending.split(b"\n")
        for line in whole:
            yield line.decode(errors="replace")
    if pending:
        yield pending.decode(errors="replace")
