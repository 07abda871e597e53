"""podman on the bed's own storage: the command, running it, the build lock and image IDs.

Every image step (the base's import, a build, a save) goes through `run`, so podman keeps its
storage under the cache and nothing here touches the host's containers or networks. The lock and
the IDs are what the base, the builds and the archives share; they sit below all three.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from tfjob_testbed.core.paths import cache_dir


class ImageError(RuntimeError):
    """A base, build or save step failed; the message carries the command's output tail."""


def images_dir() -> Path:
    """Where the base rootfs, archives, stamps and podman's storage live."""
    return cache_dir() / "images"


def podman_command() -> list[str]:
    """`podman` with this cache's private storage and the settings that work on this host.

    runc, not crun (crun fails on this cgroup v1 hybrid); cgroupfs, as there may be no systemd;
    file events, as there may be no journald.
    """
    podman_dir = cache_dir() / "podman"
    return [
        "podman",
        "--root",
        str(podman_dir / "root"),
        "--runroot",
        str(podman_dir / "runroot"),
        "--runtime",
        shutil.which("runc", path="/usr/sbin:/usr/bin:/sbin:/bin") or "runc",
        "--cgroup-manager",
        "cgroupfs",
        "--events-backend",
        "file",
    ]


_thread_lock = threading.RLock()
_depth = 0


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """One build at a time across processes (a file lock); re-entrant within this process."""
    global _depth
    with _thread_lock:
        if _depth:
            _depth += 1
            try:
                yield
            finally:
                _depth -= 1
            return
        images_dir().mkdir(parents=True, exist_ok=True)
        with open(images_dir() / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            _depth = 1
            try:
                yield
            finally:
                _depth = 0


def run(*args: str, log: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run podman with the private storage; raise ImageError with the output tail on failure.

    With `log`, the output goes there as it comes (a cold build runs for minutes: tail it).
    """
    cmd = [*podman_command(), *args]
    if log is None:
        done = subprocess.run(cmd, capture_output=True, text=True)
        output = done.stdout + done.stderr
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as out:
            done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
        output = log.read_text(errors="replace")
    if done.returncode != 0:
        tail = "\n".join(output.splitlines()[-30:])
        raise ImageError(f"{' '.join(cmd)} exited {done.returncode}:\n{tail}")
    return done


def image_id(image: str) -> str:
    """The full image ID (sha256 hex, no prefix) that `image` (a tag or an ID) names now."""
    done = run("image", "inspect", "--format", "{{.Id}}", image)
    return done.stdout.strip()


def quiet_id(image: str) -> str | None:
    """`image_id`, or None when nothing is named so: whether a stamp's image is still there."""
    done = subprocess.run(
        [*podman_command(), "image", "inspect", "--format", "{{.Id}}", image],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() if done.returncode == 0 else None
