"""The sandbox (pause) binary, from Kubernetes' own pause.c in the Go module the bed builds
from: no registry serves registry.k8s.io/pause here. Both the real node's image and kind's
node image are made from it."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tfjob_testbed.core.gobuild import KUBERNETES, module_source


def compile_pause(binary: Path) -> Path:
    """pause.c built static and stripped, as Kubernetes' build/pause/Makefile builds it."""
    source = module_source(KUBERNETES, "build/pause/linux/pause.c")
    binary.parent.mkdir(parents=True, exist_ok=True)
    version = f"-DVERSION=v{KUBERNETES.version()}-tfjob"
    subprocess.run(["gcc", "-Os", "-Wall", "-Werror", "-static", version, "-o", str(binary),
                    str(source)], check=True, capture_output=True)  # fmt: skip
    subprocess.run(["strip", str(binary)], check=True)
    return binary
