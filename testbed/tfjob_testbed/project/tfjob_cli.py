"""The `tfjob` command as a user runs it: its own process, with only $KUBECONFIG."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tfjob_testbed.core.paths import ROOT


def cli_env(kubeconfig: Path) -> dict[str, str]:
    return {"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"}


def tfjob_cli(
    kubeconfig: Path, *args: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tfjob_operator.cli", *args],
        env=cli_env(kubeconfig),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
