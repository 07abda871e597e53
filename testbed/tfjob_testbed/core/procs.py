"""Processes and ports: free ports to listen on, and stopping a process for good."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any


def free_ports(n: int, address: str = "127.0.0.1") -> list[int]:
    """`n` distinct TCP ports free on `address` now (all bound at once, then released)."""
    socks = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(n)]
    try:
        for sock in socks:
            sock.bind((address, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def free_port(address: str = "127.0.0.1") -> int:
    """One TCP port free on `address` now."""
    return free_ports(1, address)[0]


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (exited, not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return not Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")
    except OSError:
        return False


def terminate(
    proc: subprocess.Popen[Any] | int,
    timeout: float = 15,
    *,
    group: bool = False,
    exe: str | None = None,
) -> int | None:
    """Stop a process: SIGTERM, then SIGKILL if it is still there after `timeout` seconds.

    `proc` is a child of this process (a Popen: it is reaped, and its exit code returned) or
    the PID of one another process started (polled until gone; None returned). `group`: signal
    its whole process group (a child started with start_new_session). `exe`, for a PID: only if
    /proc/PID/exe ends with this, as a PID recorded earlier may belong to another process by now.
    """
    pid = proc if isinstance(proc, int) else proc.pid

    def send(sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)

    if isinstance(proc, subprocess.Popen):
        if proc.poll() is None:
            send(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                send(signal.SIGKILL)
        return proc.wait()
    if exe is not None:
        try:
            path = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
        except OSError:
            return None
        if not path.endswith(exe):
            return None  # not the process it was any more
    if alive(pid):
        send(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            send(signal.SIGKILL)
    return None
