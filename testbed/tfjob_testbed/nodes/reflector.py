"""The node services' view of the API server: a thread per kind that lists it, then watches it
(`Reflector`), and the messages it sends (`Synced`, `Changed`).

The node services process (`nodeservices.py`) keeps its state in one thread; the reflectors
feed it through a queue and outlive whatever the API server does (a restart, an expired watch),
so that thread never talks to the API server to learn what changed."""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import kubernetes

from tfjob_testbed.nodes.kubeobjects import Obj

WATCH_SECONDS = 300
REQUEST_TIMEOUT = (5.0, 30.0)
MIN_BACKOFF, MAX_BACKOFF = 0.25, 5.0

# The process's own log, to which `nodeservices.main` gives a handler.
log = logging.getLogger("nodeservices")


def describe(e: BaseException) -> str:
    """One short line for a log: urllib3 nests the cause of a refused connection deep down."""
    if isinstance(e, kubernetes.client.ApiException):
        return f"{e.status} {e.reason}"
    reason = getattr(e, "reason", None)  # MaxRetryError
    if isinstance(reason, BaseException):
        e = reason
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


@dataclass(frozen=True)
class Synced:
    """A fresh list of one kind: it replaces everything known of that kind."""

    kind: str
    items: list[Obj]


@dataclass(frozen=True)
class Changed:
    """One watch event (ADDED, MODIFIED or DELETED)."""

    kind: str
    type: str
    obj: Obj


Message = Synced | Changed


class Reflector(threading.Thread):
    """Lists one kind, then watches it from the list's resourceVersion, sending a Synced and
    then Changed messages to ``out``. A watch that ends is resumed from the last version seen;
    one that expired (410 Gone) is replaced by a new list; errors (the API server restarting)
    are retried with a growing delay."""

    def __init__(
        self,
        kind: str,
        list_fn: Callable[..., Any],
        out: queue.Queue[Message],
        *,
        watch_seconds: int = WATCH_SECONDS,
        min_backoff: float = MIN_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
    ) -> None:
        super().__init__(name=f"watch-{kind}", daemon=True)
        self.kind, self.list_fn, self.out = kind, list_fn, out
        self.watch_seconds = watch_seconds
        self.min_backoff, self.max_backoff = min_backoff, max_backoff
        self.stopping = threading.Event()

    def run(self) -> None:
        backoff = self.min_backoff
        failing = False
        while not self.stopping.is_set():
            try:
                version = self._list()
                if failing:
                    log.info("%s: listed again at resourceVersion %s", self.kind, version)
                failing, backoff = False, self.min_backoff
                self._watch(version)
                return
            except kubernetes.client.ApiException as e:
                if e.status == 410:
                    log.info("%s: watch expired (410 Gone), listing again", self.kind)
                    continue
                error = describe(e)
            except Exception as e:  # the thread must outlive any failure of the API server
                error = describe(e)
            failing = True
            log.info("%s: %s; retrying in %.2fs", self.kind, error, backoff)
            self.stopping.wait(backoff)
            backoff = min(backoff * 2, self.max_backoff)

    def stop(self) -> None:
        self.stopping.set()

    def _list(self) -> str:
        resp = self.list_fn(_preload_content=False, _request_timeout=REQUEST_TIMEOUT)
        body = json.loads(resp.data)
        self.out.put(Synced(self.kind, list(body.get("items") or [])))
        return str(body["metadata"]["resourceVersion"])

    def _watch(self, version: str) -> None:
        """Stream events until stopped; raises on errors, ApiException(410) on expiry."""
        while not self.stopping.is_set():
            watch = kubernetes.watch.Watch()
            for event in watch.stream(
                self.list_fn,
                resource_version=version,
                timeout_seconds=self.watch_seconds,
                allow_watch_bookmarks=True,
                deserialize=False,
                _request_timeout=(REQUEST_TIMEOUT[0], self.watch_seconds + REQUEST_TIMEOUT[1]),
            ):
                obj = event["object"]
                version = obj["metadata"]["resourceVersion"]
                if event["type"] != "BOOKMARK":
                    self.out.put(Changed(self.kind, event["type"], obj))
                if self.stopping.is_set():
                    watch.stop()
