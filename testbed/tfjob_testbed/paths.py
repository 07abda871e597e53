"""Where things are: the checkout the test bed works on, and the cache it keeps between runs."""

from __future__ import annotations

import os
from pathlib import Path

# testbed/tfjob_testbed/paths.py: the package is installed editable, so this is the checkout.
ROOT = Path(__file__).resolve().parents[2]


def cache_dir() -> Path:
    """Where built binaries, tools and images are kept between runs (override: $TFJOB_CACHE)."""
    override = os.environ.get("TFJOB_CACHE")
    return Path(override) if override else Path.home() / ".cache" / "tfjob-operator"
