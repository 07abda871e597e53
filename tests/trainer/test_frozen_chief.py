"""A chief held inside TensorFlow with the GIL taken, waiting on a lost peer's connection (a
save registering its function on every task), runs no thread of its own: its supervisor, in
another process, sees its pulse stop while every peer answers and ends it as for a lost peer.
Here the task holds the GIL in a C call that does not return, as TensorFlow's did."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

from tfjob_trainer.runtime.exit_codes import EXIT_PEER_LOST

TASK = textwrap.dedent(
    """
    import ctypes, os, sys, time
    from tfjob_trainer.runtime import stall, supervisor

    def task():
        stall.Watchdog([sys.argv[1]], 1.0, on_stall=print).start()
        time.sleep(2 * stall.CHECK_SECONDS + 0.5)  # it beats
        print("holding", os.getpid(), flush=True)
        ctypes.PyDLL(None).sleep(600)  # a C call that keeps the GIL
        return 0

    sys.exit(supervisor.supervised(task))
    """
)


def test_a_chief_whose_threads_stopped_while_every_peer_answers_is_ended():
    with socket.create_server(("127.0.0.1", 0)) as peer:
        address = f"127.0.0.1:{peer.getsockname()[1]}"
        proc = subprocess.run(
            [sys.executable, "-c", TASK, address],
            capture_output=True,
            text=True,
            timeout=120,  # not the C call's 600 s
        )
    assert proc.returncode == EXIT_PEER_LOST, proc.stderr
    held = next(line for line in proc.stdout.splitlines() if line.startswith("holding"))
    assert "no thread has run for" in proc.stderr, proc.stderr
    assert "waits on a connection to a peer that was replaced" in proc.stderr, proc.stderr
    try:
        os.kill(int(held.split()[1]), 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError("the task outlived its supervisor's verdict")
