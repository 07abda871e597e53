"""Signals in the bed: a stop that unwinds a main loop, and a handler tried at every line.

`Interrupted` is how the bed's long-running programs (`make cluster`, the node services) leave
their loops on a signal and still tear down in their `finally`.

Python runs a handler in the main thread between two bytecodes, so a second signal runs the
handler again inside the first, wherever that one is, even inside a lock it holds. Trying each
of those places by sending real signals is a matter of luck; a trace function tries them all.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

Handler = Callable[[int, FrameType | None], Any]


class Interrupted(BaseException):
    """A signal asked the program to stop; its text is the signal's name. A BaseException, so
    that no `except Exception` of the loop it unwinds catches it."""


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


def interrupt_on(*signums: signal.Signals) -> None:
    """From now on each of `signums` raises `Interrupted` in the main thread."""
    for signum in signums:
        signal.signal(signum, _interrupt)


def handled_again_everywhere(handler: Handler, signum: int, timeout: float = 5.0) -> int:
    """Run `handler(signum)`, and inside it the same call again at every line it and what it
    calls reach, one at a time. The number of places tried; fails if any of them never
    returns (a lock the outer call holds) within `timeout`."""
    places = 0
    done = threading.Event()

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal places
        if event == "line":
            places += 1
            handler(signum, None)  # untraced: Python does not trace its own trace function
        return trace

    def outer() -> None:
        sys.settrace(trace)
        try:
            handler(signum, None)
        finally:
            sys.settrace(None)
            done.set()

    thread = threading.Thread(target=outer, daemon=True)
    thread.start()
    if not done.wait(timeout):
        raise AssertionError(f"the handler, run again inside itself, never returned ({places})")
    return places
