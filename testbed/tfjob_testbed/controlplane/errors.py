"""How the control plane's failures read: the error, and the lines of a log that explain it."""

from __future__ import annotations

from pathlib import Path

LOG_TAIL_LINES = 40


class ControlPlaneError(RuntimeError):
    """The control plane failed to start; the message carries the relevant log tail."""


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """Last lines of a log, led by earlier lines that usually explain an exit."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    all_lines = text.splitlines()
    head, tail = all_lines[:-lines], all_lines[-lines:]
    causes = [line for line in head if line.startswith(("Error:", "F0", "F1", "panic:"))]
    return "\n".join([*causes[-5:], *(["..."] if causes else []), *tail])
