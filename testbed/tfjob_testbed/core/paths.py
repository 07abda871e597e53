"""Where things are: the checkout the test bed works on, and the cache it keeps between runs."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

# testbed/tfjob_testbed/core/paths.py: the package is installed editable, so this is the checkout.
ROOT = Path(__file__).resolve().parents[3]


def cache_dir() -> Path:
    """Where built binaries, tools and images are kept between runs (override: $TFJOB_CACHE)."""
    override = os.environ.get("TFJOB_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "tfjob-operator"


def scratch_dir(prefix: str) -> Path:
    """A fresh directory under the system's temp dir, removed when the process exits: a
    control plane's etcd and logs take hundreds of MB, which runs must not leave behind."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path
