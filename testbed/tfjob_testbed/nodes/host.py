"""This host as the real nodes (`realnode.py`, `node.py`, `second_node.py`) see and change it:
commands run to completion, kernel settings, mounts and cgroups."""

from __future__ import annotations

import subprocess
from pathlib import Path


class NodeError(RuntimeError):
    """The node could not be brought up; the message says which part and shows its log."""


def run(*argv: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a command to its end, its output captured; NodeError if it fails and `check`."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def sysctl_path(key: str) -> Path:
    """The /proc/sys file of a kernel setting (`net.ipv4.ip_forward`)."""
    return Path("/proc/sys") / key.replace(".", "/")


def is_mount_point(path: str) -> bool:
    """Whether something is mounted on `path` (a bind mount of a directory on itself too, which
    os.path.ismount cannot tell)."""
    return any(
        line.split()[1].encode().decode("unicode_escape") == path
        for line in Path("/proc/mounts").read_text().splitlines()
    )


def mounts_under(prefixes: list[str]) -> list[str]:
    """Every mount point on or under one of `prefixes`, deepest first."""
    mounts = []
    for line in Path("/proc/mounts").read_text().splitlines():
        point = line.split()[1].encode().decode("unicode_escape")
        if any(point == p or point.startswith(p.rstrip("/") + "/") for p in prefixes):
            mounts.append(point)
    return sorted(set(mounts), key=len, reverse=True)


def cgroup_hierarchies() -> list[Path]:
    """Every cgroup v1 hierarchy's mount point, each once."""
    found: dict[str, Path] = {}
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup":
            found.setdefault(fields[1], Path(fields[1]))
    return list(found.values())


def cgroup_tops(root: str) -> list[Path]:
    """The top cgroup `root` in every hierarchy (v1 and the unified one), each once (cgroup v1
    mounts some hierarchies under two names: cpu and cpuacct are links to cpu,cpuacct)."""
    return sorted({p.resolve() for p in Path("/sys/fs/cgroup").glob(f"*/{root}") if p.is_dir()})
