"""A per-job work queue: one reconcile at a time per job, bursts of events folded into one.

Pod and job events only mark a job dirty. While its reconcile runs, more marks fold into a single
rerun, so a burst of pod updates costs one status write, not one per event. A reconcile may ask
to run again after a delay (deadlines, TTL); a failing one is retried with a growing backoff.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable

log = logging.getLogger(__name__)

Work = Callable[[Hashable], Awaitable[float | None]]


class RetryableError(Exception):
    """A failure whose message says it all (e.g. an API error): logged without a traceback."""


class WorkQueue:
    def __init__(self, work: Work, *, max_backoff: float = 60.0) -> None:
        self._work = work
        self._max_backoff = max_backoff
        self._dirty: set[Hashable] = set()
        self._running: dict[Hashable, asyncio.Task[None]] = {}
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._failures: dict[Hashable, int] = {}
        self.runs = 0  # reconciles begun so far

    def schedule(self, key: Hashable) -> None:
        """Reconcile `key` now, or right after the reconcile that is running."""
        if key in self._running:
            self._dirty.add(key)
            return
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        self._running[key] = asyncio.get_running_loop().create_task(self._run(key))

    def schedule_later(self, key: Hashable, delay: float) -> None:
        """Reconcile `key` after `delay` seconds unless an earlier wake-up is already set."""
        loop = asyncio.get_running_loop()
        timer = self._timers.get(key)
        when = loop.time() + max(delay, 0.0)
        if timer is not None and timer.when() <= when:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_at(when, self._wake, key)

    def _wake(self, key: Hashable) -> None:
        self._timers.pop(key, None)
        self.schedule(key)

    async def _run(self, key: Hashable) -> None:
        delay: float | None = None
        try:
            while True:
                self._dirty.discard(key)
                self.runs += 1
                try:
                    delay = await self._work(key)
                    self._failures.pop(key, None)
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    n = self._failures[key] = self._failures.get(key, 0) + 1
                    delay = min(2.0 ** (n - 1), self._max_backoff)
                    log.error(
                        "reconcile of %s failed (attempt %d): %s; retrying in %.0fs",
                        key,
                        n,
                        e,
                        delay,
                        exc_info=not isinstance(e, RetryableError),
                    )
                    break
                if key not in self._dirty:
                    break
        finally:
            self._running.pop(key, None)
        if delay is not None:
            self.schedule_later(key, delay)

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in self._running.values():
            task.cancel()
