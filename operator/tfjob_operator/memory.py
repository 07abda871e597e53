"""The operator's resident memory: few malloc arenas, and freed memory handed back.

The API client's calls run in a thread pool, and glibc gives each thread a malloc arena of its
own (up to 8 per core). After a burst of events (1000 jobs created at once) every arena keeps
the pages it grew to, so the process stays at its peak. Two arenas and a trim once the burst is
over keep it near what it holds.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # mallopt parameter, from glibc's malloc.h
ARENAS = 2


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


_LIBC = _libc()


def limit_arenas() -> bool:
    """At most `ARENAS` malloc arenas; False where the C library is not glibc."""
    return _LIBC is not None and bool(_LIBC.mallopt(M_ARENA_MAX, ARENAS))


def trim() -> None:
    """Give the free pages at the top of every arena back to the system."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


class Trimmer:
    """Trims a few seconds after the work queue falls idle, at most once per `delay`: the
    trim walks the heap, which a steady trickle of events should not pay for each time."""

    def __init__(self, delay: float = 5.0) -> None:
        self.delay = delay
        self._pending: asyncio.TimerHandle | None = None

    def soon(self) -> None:
        if self._pending is None:
            self._pending = asyncio.get_running_loop().call_later(self.delay, self._run)

    def _run(self) -> None:
        self._pending = None
        trim()
