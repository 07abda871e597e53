"""Does the model fit the parameter servers' memory? Checked on the chief before any variable
is placed, so that a model too big for a PS fails the job with one line, not with a PS
OOM-killed and restarted until the backoff limit.

Each parameter server writes its memory budget (its cgroup's limit, as a container sees it, and
what the process holds already) to a file of its own in its temp directory before it serves.
The chief reads that file through TensorFlow, with an op placed on the PS's device: no API
access, no new field in TF_CONFIG, and it works wherever the PS runs our trainer. Without the
file (another program serves), there is nothing to check against.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import UsageError

log = logging.getLogger(__name__)

UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a huge number
# What a PS needs besides the variables (gRPC buffers, a step's gradients in flight, Python):
# the check leaves this share of the free memory aside.
HEADROOM = 0.2


@dataclass(frozen=True)
class Budget:
    limit: int  # bytes the container may hold
    used: int  # what the serving process held when it wrote the file

    @property
    def free(self) -> int:
        return max(0, self.limit - self.used)


def budget_path(port: int | str, tmp: str | None = None) -> Path:
    """Where the PS serving on `port` writes its budget (ports tell apart the tasks of one
    host, as in a local run)."""
    return Path(tmp or tempfile.gettempdir()) / f"tfjob-ps-{port}.memory.json"


def cgroup_limit(
    proc: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")
) -> int | None:
    """This process's memory limit in bytes, None when there is none. cgroup v2 and v1; inside
    a container the cgroup root is the container's own, outside it the path comes from
    /proc/self/cgroup."""
    candidates: list[Path] = []
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        path = path.lstrip("/")
        if hierarchy == "0" and controllers == "":
            candidates.append(root / path / "memory.max")
        elif "memory" in controllers.split(","):
            candidates.append(root / "memory" / path / "memory.limit_in_bytes")
    candidates += [root / "memory.max", root / "memory" / "memory.limit_in_bytes"]
    for candidate in candidates:
        try:
            text = candidate.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        if text.isdigit():
            value = int(text)
            return None if value >= UNLIMITED else value
    return None


def resident_bytes(status: Path = Path("/proc/self/status")) -> int:
    """This process's resident memory."""
    match = re.search(r"^VmRSS:\s+(\d+) kB", status.read_text(), re.M)
    return int(match.group(1)) * 1024 if match else 0


def write_budget(port: int | str) -> None:
    """A PS, before it serves: its budget, for the chief to read (and none left from an
    earlier process on the same port when it has no limit)."""
    limit = cgroup_limit()
    path = budget_path(port)
    try:
        if limit is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(json.dumps({"limit": limit, "used": resident_bytes()}))
    except OSError as e:
        log.warning("cannot write the memory budget %s (%s): the chief will not check it", path, e)


def read_budgets(ps_addresses: Sequence[str]) -> dict[int, Budget]:
    """Each PS's budget, read on its own device; a PS that wrote none is left out."""
    import tensorflow as tf

    budgets: dict[int, Budget] = {}
    for i, address in enumerate(ps_addresses):
        path = str(budget_path(address.rpartition(":")[2]))
        try:
            with tf.device(f"/job:ps/replica:0/task:{i}/device:CPU:0"):
                raw = tf.io.read_file(path).numpy()
            data = json.loads(raw)
            budgets[i] = Budget(int(data["limit"]), int(data["used"]))
        except (tf.errors.NotFoundError, ValueError, KeyError, TypeError):
            continue
    return budgets


def placement(sizes: Sequence[int], shards: int) -> list[int]:
    """Bytes each PS gets when variables go round-robin in creation order, as
    ParameterServerStrategy places them without a partitioner."""
    per = [0] * shards
    for i, size in enumerate(sizes):
        per[i % shards] += size
    return per


def variable_bytes(model: Any, optimizer: Any) -> tuple[list[int], list[str]]:
    """Per model variable, in creation order: its bytes plus its share of the optimizer's
    slots (colocated with it), and its name."""
    import numpy as np

    def size(v: Any) -> int:
        # Keras variables name their dtype as a string, TensorFlow's as a DType.
        itemsize: int = np.dtype(getattr(v.dtype, "name", v.dtype)).itemsize
        return int(np.prod(v.shape)) * itemsize

    trainable = {id(v) for v in model.trainable_variables}
    slot_bytes = sum(size(v) for v in optimizer.variables if len(v.shape) > 0)
    trainable_bytes = sum(size(v) for v in model.trainable_variables) or 1
    ratio = slot_bytes / trainable_bytes
    sizes, names = [], []
    for v in model.variables:
        own = size(v)
        sizes.append(int(own * (1 + ratio)) if id(v) in trainable else own)
        names.append(getattr(v, "path", None) or v.name)
    return sizes, names


def check(
    sizes: Sequence[int], names: Sequence[str], budgets: dict[int, Budget], shards: int, where: str
) -> None:
    """Fail with one line when a PS's share does not fit its free memory (headroom kept)."""
    per = placement(sizes, shards)
    for i, budget in sorted(budgets.items()):
        room = int(budget.free * (1 - HEADROOM))
        if per[i] <= room:
            continue
        biggest = max(range(len(sizes)), key=lambda k: sizes[k] if k % shards == i else -1)
        raise UsageError(
            f"{where} does not fit the parameter servers' memory: ps {i} would hold "
            f"{_mib(per[i])} of variables and optimizer slots (the largest, {names[biggest]}, "
            f"{_mib(sizes[biggest])}), and its memory limit {_mib(budget.limit)} leaves "
            f"{_mib(room)} for them: raise the PS replicas' resources.limits.memory or add PS "
            "replicas"
        )
    for i, budget in sorted(budgets.items()):
        log.info(
            "ps %d: %s of variables and slots, %s free under its limit",
            i,
            _mib(per[i]),
            _mib(budget.free),
        )


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"
