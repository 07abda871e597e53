"""The operator as its own process, started and killed the way a deployment would be."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.core.paths import ROOT
from tfjob_testbed.core.procs import free_port, terminate


class OperatorProcess:
    """`python -m tfjob_operator` against the cluster of `kubeconfig`, with a liveness endpoint
    that tells when it is up."""

    def __init__(self, kubeconfig: Path, log: Path, args: Sequence[str] = ()) -> None:
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"}
        self.log, self.args = log, list(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        port = free_port()
        url = f"http://127.0.0.1:{port}/healthz"
        self.starts += 1
        out = open(self.log, "ab")  # noqa: SIM115 (the process owns it)
        out.write(f"\n===== start #{self.starts} =====\n".encode())
        out.flush()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tfjob_operator",
                "--standalone",
                "--liveness",
                url,
                "--log-level",
                "debug",
                *self.args,
            ],
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

        def healthy() -> bool:
            assert self.proc is not None  # set just above
            if self.proc.poll() is not None:
                raise AssertionError(f"operator exited {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        wait_for(healthy, 60, "operator liveness endpoint")

    def kill(self) -> None:
        """A crash: SIGKILL, no chance to clean up."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc:
            terminate(self.proc, 30)

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def denials(self, user: str) -> list[str]:
        """Log lines where the API server refused `user` something (RBAC names the user)."""
        return [ln for ln in self.log.read_text().splitlines() if user in ln and "cannot" in ln]


@contextlib.contextmanager
def stepped_aside(
    running: OperatorProcess, kubeconfig: Path, log: Path, args: Sequence[str] = ()
) -> Iterator[OperatorProcess]:
    """Another operator (other credentials, other flags) while `running` steps aside; `running`
    starts again afterwards, whatever happened."""
    running.stop()
    other = OperatorProcess(kubeconfig, log, args)
    try:
        other.start()
        yield other
    finally:
        other.stop()
        running.start()
