"""Kueue's part in the unit tables: a Workload condition as Kueue's controllers write it."""

from __future__ import annotations

from typing import Any

NOW = "2026-01-01T00:00:00Z"


def cond(type_: str, status: bool, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message or reason,
        "lastTransitionTime": NOW,
    }
