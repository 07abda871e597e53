"""The supervisor's own thread must never take the SIGTERM meant for the task: the kernel gives
a process's signal to any thread that does not block it, and only the main thread runs Python's
handler, which forwards it."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tfjob_trainer.runtime import supervisor

TASK = textwrap.dedent(
    """
    import sys, time
    from tfjob_trainer.runtime import supervisor

    def task():
        print("started", flush=True)
        time.sleep(60)
        return 0

    sys.exit(supervisor.supervised(task))
    """
)


def blocked_signals(pid: int, tid: int) -> int:
    status = Path(f"/proc/{pid}/task/{tid}/status").read_text()
    return int(next(ln for ln in status.splitlines() if ln.startswith("SigBlk:")).split()[1], 16)


def test_only_the_main_thread_of_the_supervisor_takes_sigterm_and_passes_it_on():
    proc = subprocess.Popen([sys.executable, "-c", TASK], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "started\n"
        handled = sorted(supervisor.HANDLED)

        def masks() -> dict[int, list[bool]]:
            tids = [int(t.name) for t in Path(f"/proc/{proc.pid}/task").iterdir()]
            return {
                t: [bool(blocked_signals(proc.pid, t) & 1 << (s - 1)) for s in handled]
                for t in tids
            }

        def settled(seen: dict[int, list[bool]]) -> bool:
            # The main thread blocks them for a moment while it starts the other one.
            return len(seen) >= 2 and all(
                all(bits) if tid != proc.pid else not any(bits) for tid, bits in seen.items()
            )

        deadline = time.monotonic() + 10
        while not settled(seen := masks()):
            assert time.monotonic() < deadline, f"blocked signals by thread: {seen}"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()


SAVES_LATE = textwrap.dedent(
    """
    import signal, sys, time
    from tfjob_trainer.runtime import supervisor
    from tfjob_trainer.runtime.stopping import STOP, leave

    def held():
        # SIGTERM came while the task could not answer; it says it saves 0.3 s later, and
        # saves for 2 s: more than the 1 s a task that saves nothing has.
        signal.signal(signal.SIGTERM, lambda *_: setattr(held, "asked", True))
        print("started", flush=True)
        while not getattr(held, "asked", False):
            time.sleep(0.01)
        time.sleep(0.3)
        STOP.defer()
        time.sleep(2.0)
        print("saved", flush=True)
        leave(7)

    sys.exit(supervisor.supervised(held))
    """
)


def test_a_task_that_says_it_saves_after_the_stop_is_not_killed_while_it_saves():
    proc = subprocess.Popen([sys.executable, "-c", SAVES_LATE], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "started\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 201
        assert proc.stdout.read() == "saved\n"
    finally:
        proc.kill()
        proc.wait()


EARLY = textwrap.dedent(
    """
    import os, signal, sys, time
    from tfjob_trainer.runtime import supervisor

    class Late(supervisor.Supervisor):
        def wait(self, mask=None):
            os.kill(os.getppid(), signal.SIGUSR1)  # ready for the SIGTERM
            time.sleep(0.5)  # it comes now, before any handler is in place
            return super().wait(mask)

    supervisor.Supervisor = Late

    def task():
        time.sleep(60)
        return 0

    sys.exit(supervisor.supervised(task))
    """
)


def test_a_sigterm_before_the_supervisors_handler_is_taken_not_lost():
    """PID 1 of a container drops a signal it has no handler for: the supervisor holds
    SIGTERM blocked until its handler is in place, and then takes it."""
    ready = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: ready.append(1))
    proc = subprocess.Popen([sys.executable, "-c", EARLY])
    try:
        deadline = time.monotonic() + 20
        while not ready:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGUSR1, previous)
        proc.kill()
        proc.wait()
