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
