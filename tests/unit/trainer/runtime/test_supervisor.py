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
        deadline = time.monotonic() + 10
        while len(tids := [int(t.name) for t in Path(f"/proc/{proc.pid}/task").iterdir()]) < 2:
            assert time.monotonic() < deadline, "the supervisor started no thread"
            time.sleep(0.05)
        for tid in tids:
            mask = blocked_signals(proc.pid, tid)
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM):
                assert bool(mask & 1 << (sig - 1)) == (tid != proc.pid), (tid, sig)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 128 + signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()
