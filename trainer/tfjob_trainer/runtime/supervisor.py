"""A stopped task leaves within seconds, even one that cannot run Python.

A Python signal handler runs only when the main thread is back in the interpreter. A task held
inside TensorFlow (a strategy's setup waiting for peers that are going away, which holds the
GIL) never gets there: SIGTERM changed nothing, and the task kept its pod, and its GPU, until
the grace period ended.

So the trainer's entry forks before anything else. The parent, small and outside TensorFlow,
supervises: it forwards SIGTERM to the task and, unless the task has said that it saves on a
stop (`StopRequest.defer`, one byte on a pipe), kills the task after `LEAVE_SECS` and leaves as
stopped, with nothing saved, as the task itself would have left. A task that saves gets the
whole grace period for its save, as before. The parent passes the task's exit on: its code, or
128 + the signal that ended it, as a shell does.

A chief under parameter servers also sends its supervisor a pulse (`stall.PULSE`): a chief
whose threads stopped running while every peer answers is killed and leaves as for a lost peer
(`stall.Frozen`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from . import stall
from .exit_codes import EXIT_PEER_LOST
from .stopping import STOP, leave

# How long a task that saves nothing has to leave by itself on SIGTERM before it is killed.
LEAVE_SECS = 1.0
PR_SET_PDEATHSIG = 1


def supervised(task: Callable[[], int]) -> int:
    """Run `task` in a child process under this process's supervision; in the child, the
    task's return; in the parent, the task's exit status. SIGTERM is held (blocked, so it
    stays pending) from here until the supervisor's handler is in place: PID 1 of a
    container drops a signal it has no handler for, and a stop that came early was lost."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    saves_r, saves_w = os.pipe()
    pulse_r, pulse_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # the task's own: SIGTERM ends it
        os.close(saves_r)
        os.close(pulse_r)
        parent_death_signal(signal.SIGKILL)  # the task goes with its supervisor
        STOP.report_saves_to(saves_w)
        stall.PULSE.report_to(pulse_w)
        return task()
    os.close(saves_w)
    os.close(pulse_w)
    return Supervisor(pid, saves_r, pulse_r).wait(before)


def parent_death_signal(sig: int) -> None:
    """Be sent `sig` when the parent process goes, however it goes (Linux only)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)


class Supervisor:
    def __init__(self, pid: int, saves: int, pulse: int) -> None:
        self.pid, self.saves = pid, saves
        self.task_saves = self.killed = False
        os.set_blocking(saves, False)
        self.frozen = FrozenTask(pid, pulse)

    def wait(self, mask: Iterable[int] | None = None) -> int:
        """Until the task exits, forwarding SIGTERM; its exit status. `mask`: the signal mask
        to restore once the handlers are in place (a SIGTERM held till then is taken)."""
        start_deaf(self.frozen)
        signal.signal(signal.SIGTERM, self._stop)
        # Ctrl-C reaches the task from the terminal itself (one process group).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGALRM, self._kill)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _, status = os.waitpid(self.pid, 0)  # retried after each handler (PEP 475)
        if self.killed:
            print(
                f"tfjob-trainer: stopped; the task, held inside TensorFlow, did not leave within "
                f"{LEAVE_SECS:g} s of SIGTERM and was killed (it had nothing to save)",
                file=sys.stderr,
                flush=True,
            )
            leave(None)
        if self.frozen.killed:
            return EXIT_PEER_LOST
        code = os.waitstatus_to_exitcode(status)
        return code if code >= 0 else 128 - code

    def _stop(self, signum: int, frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGTERM)
        if not self._saves():
            signal.setitimer(signal.ITIMER_REAL, LEAVE_SECS)

    def _kill(self, signum: int, frame: Any) -> None:
        """LEAVE_SECS after SIGTERM: a task that has said meanwhile that it saves keeps its
        grace period for its save; any other is killed."""
        if self._saves():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
            self.killed = True

    def _saves(self) -> bool:
        """Whether the task has said that it saves on a stop (at any time until now)."""
        with contextlib.suppress(BlockingIOError):
            self.task_saves = self.task_saves or bool(os.read(self.saves, 1))
        return self.task_saves


HANDLED = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGALRM})


def start_deaf(thread: threading.Thread) -> None:
    """Start `thread` with the signals the supervisor handles blocked in it. The kernel gives a
    process's signal to any thread that does not block it, and a signal taken by another thread
    does not interrupt the main thread's `waitpid`, so the handler (which Python runs only in
    the main thread) would wait for the task's exit: SIGTERM would never be passed on."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED)
    try:
        thread.start()  # a new thread starts with its creator's mask
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class FrozenTask(threading.Thread):
    """Reads the task's pulse and kills the task once `stall.Frozen` says so."""

    def __init__(self, pid: int, pulse: int) -> None:
        super().__init__(name="tfjob-frozen-task", daemon=True)
        self.pid, self.pulse = pid, pulse
        self.judge = stall.Frozen()
        self.killed = False

    def run(self) -> None:
        while True:
            ready, _, _ = select.select([self.pulse], [], [], stall.CHECK_SECONDS)
            if ready:
                data = os.read(self.pulse, 65536)
                if not data:
                    return  # the task is gone
                self.judge.feed(data)
            message = self.judge.check()
            if message:
                print(f"tfjob-trainer: chief {message}", file=sys.stderr, flush=True)
                self.killed = True
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                return
