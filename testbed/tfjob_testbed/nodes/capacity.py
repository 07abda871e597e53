"""What a node needs of its host, checked before it starts: below the kubelet's eviction
thresholds it evicts pods, and the tests would then time out with nothing said. The check stops
with one line that names the shortfall instead."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

GIB = 1 << 30
MEMORY_FLOOR = 100 << 20
# The kubelet's hard eviction thresholds (its configuration is built from these).
EVICTION_HARD = {
    "memory.available": f"{MEMORY_FLOOR >> 20}Mi",
    "nodefs.available": "1%",
    "nodefs.inodesFree": "1%",
    "imagefs.available": "1%",
}
# What a node writes beside its images (containers' layers, logs, claims' volumes, checkpoints)
# and what a job of the bed's size takes in memory (TensorFlow tasks of ~600 MB each, the control
# plane, the operator), above those thresholds.
NODE_DISK = 4 * GIB
NODE_MEMORY = 4 * GIB


@dataclass(frozen=True)
class Disk:
    """One filesystem a node writes to: what for, a path on it, its size and free bytes."""

    role: str
    path: Path
    device: int
    size: int
    free: int


def _percent(threshold: str) -> float:
    return float(threshold.rstrip("%")) / 100


def shortfall(disks: list[Disk], memory_available: int, images: int) -> str | None:
    """The first thing the host lacks, as one line; None when it has room. `images`: the bytes
    of the archives the node imports into its image store."""
    need: dict[int, int] = {}  # by filesystem: both may be one
    for disk in disks:
        threshold = "imagefs.available" if disk.role == "images" else "nodefs.available"
        floor = int(disk.size * _percent(EVICTION_HARD[threshold]))
        own = images if disk.role == "images" else NODE_DISK
        need[disk.device] = max(need.get(disk.device, 0), floor) + own
    for disk in disks:
        if disk.free < need[disk.device]:
            return (
                f"not enough free disk for a node: {disk.path} ({disk.role}) has "
                f"{disk.free / GIB:.1f} GiB free and the node needs {need[disk.device] / GIB:.1f} "
                "GiB there (the kubelet evicts pods below its threshold): free space, or set "
                "TFJOB_NODE_DIR / TFJOB_CACHE to a larger filesystem"
            )
    if memory_available < NODE_MEMORY + MEMORY_FLOOR:
        return (
            f"not enough memory for a node: {memory_available / GIB:.1f} GiB available and a "
            f"node with a job needs {(NODE_MEMORY + MEMORY_FLOOR) / GIB:.1f} GiB"
        )
    return None


def disk(role: str, path: Path) -> Disk:
    """The filesystem that holds `path` (or, before it exists, its nearest existing parent)."""
    existing = path
    while not existing.exists():
        existing = existing.parent
    stat = os.statvfs(existing)
    device = existing.stat().st_dev
    return Disk(
        role, existing, device, stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize
    )


def memory_available() -> int:
    """MemAvailable of /proc/meminfo, in bytes."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/meminfo has no MemAvailable")


def host_shortfall(state: Path, store: Path, archives: list[Path]) -> str | None:
    """`shortfall` for a node whose kubelet and containers write under `state` and whose image
    store is `store`, importing those of `archives` it does not hold yet (its record of them,
    `imported.json`, as `realnode.import_images` keeps it)."""
    record = store / "imported.json"
    held = set(json.loads(record.read_text())) if record.exists() else set()
    images = sum(a.stat().st_size for a in archives if a.exists() and str(a) not in held)
    disks = [disk("the node's state", state), disk("images", store)]
    return shortfall(disks, memory_available(), images)
