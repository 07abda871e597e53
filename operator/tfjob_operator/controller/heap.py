"""Freed memory given back to the system after work.

A burst (a thousand jobs created at once: their children listed, made and patched) decodes
JSON in the event loop and in the client's threads. CPython frees it once it is done with, but
glibc keeps the freed pages in its arenas, and the operator's RSS would stay at the burst's peak
for as long as it runs. Every TRIM_SECONDS in which some reconcile began, `malloc_trim` hands
those pages back: at most once a period, whatever the load, and never while nothing happens.
Without glibc (musl) nothing is trimmed.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)

TRIM_SECONDS = 30.0

Trim = Callable[[], object]


def libc_trim() -> Trim | None:
    """glibc's `malloc_trim(0)`, or None where the C library has none."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


def due(runs: int, trimmed: int) -> bool:
    """Whether to trim now: some reconcile began (`runs`: how many so far) since the last
    trim (`trimmed`: how many then)."""
    return runs != trimmed


async def trim_after_work(
    runs: Callable[[], int], trim: Trim, period: float = TRIM_SECONDS
) -> None:
    """Every `period` seconds, trim if reconciles began since the last trim (the start-up's
    own garbage counts as work). Runs until cancelled; the trim runs in a thread (ctypes
    releases the GIL), so the event loop goes on."""
    trimmed = -1
    while True:
        await asyncio.sleep(period)
        now = runs()
        if due(now, trimmed):
            await asyncio.to_thread(trim)
            trimmed = now
            log.debug("after %d reconciles: freed memory handed back", now)
