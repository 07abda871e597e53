"""Runs a TFJob's tasks as local processes on 127.0.0.1, each with the TF_CONFIG the operator
would give it (built by the operator's own TF_CONFIG module), like pods of one job."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tensorflow as tf

from tfjob_operator.api.spec import ReplicaType
from tfjob_operator.rules import tfconfig
from tfjob_protocol.result import Result, parse_last
from tfjob_protocol.stop import ENV_TERMINATION_LOG
from tfjob_testbed.core.paths import ROOT
from tfjob_testbed.core.procs import free_ports

# Trainer flags for a job that trains in seconds: the small digits dataset, and a log line and a
# checkpoint every 20 steps.
FAST = [
    "--dataset",
    "digits",
    "--batch-size",
    "32",
    "--log-every",
    "20",
    "--checkpoint-every",
    "20",
    "--peer-timeout",
    "60",
]


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def result(self) -> Result:
        result = parse_last(self.output())
        assert result is not None, f"{self.name} printed no result line:\n{self.tail()}"
        return result

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.output().splitlines()[-n:])


class Job:
    """One job's processes. `replicas` maps task type (chief, ps, worker, evaluator) to count.
    Every task gets TFJOB_CHECKPOINT_DIR, as from a job's volume, unless `checkpoints` is
    False (a job without one). Tasks of the types in `unmounted` run in a mount namespace of
    their own where an empty tmpfs hides the checkpoint directory, as a pod without the volume
    (root only). `cpus` pins tasks by name (e.g. "worker-0": "0") to CPUs, with `taskset`, as a
    pod's CPU limit gives it its own cores. `memory` puts tasks by name in a memory cgroup of
    their own with that limit in bytes, as a container's memory limit does (root only)."""

    def __init__(
        self,
        workdir: Path,
        replicas: dict[str, int],
        args: list[str],
        checkpoints: bool = True,
        unmounted: frozenset[str] = frozenset(),
        cpus: dict[str, str] | None = None,
        memory: dict[str, int] | None = None,
    ) -> None:
        self.workdir, self.args = workdir, args
        self.cpus = cpus or {}
        self.memory = memory or {}
        self.cgroups: list[Path] = []
        self.checkpoint_dir = workdir / "checkpoints"
        self.checkpoints = checkpoints
        self.unmounted = unmounted
        self.replicas = replicas
        ports = iter(free_ports(sum(replicas.values())))
        self.cluster = {
            rt: [f"127.0.0.1:{next(ports)}" for _ in range(n)]
            for rt, n in replicas.items()
            if rt != "evaluator"
        }
        self.procs: dict[str, Proc] = {}
        self.starts: dict[str, int] = {}

    def tf_config(self, task_type: str, index: int) -> str:
        rt = next(r for r in ReplicaType if r.task_type == task_type)
        return tfconfig.tf_config(self.cluster, rt, index)

    def start(
        self,
        task_type: str,
        index: int = 0,
        extra: list[str] | None = None,
        tf_config: str | None = None,
    ) -> Proc:
        name = f"{task_type}-{index}"
        self.starts[name] = self.starts.get(name, 0) + 1
        log = self.workdir / f"{name}.{self.starts[name]}.log"
        env = {
            **{k: v for k, v in os.environ.items() if k != "TFJOB_CHECKPOINT_DIR"},
            "TF_CONFIG": tf_config if tf_config is not None else self.tf_config(task_type, index),
            "PYTHONUNBUFFERED": "1",
        }
        if self.checkpoints:
            env["TFJOB_CHECKPOINT_DIR"] = str(self.checkpoint_dir)
        # Where the task writes its termination message, as the kubelet's file is in a pod.
        termination = self.termination_log(name)
        termination.write_text("")
        env[ENV_TERMINATION_LOG] = str(termination)
        argv = [sys.executable, "-m", "tfjob_trainer", *self.args, *(extra or [])]
        if task_type in self.unmounted:
            self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
            hide = 'mount -t tmpfs tmpfs "$0" && exec "$@"'
            argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", hide,
                    str(self.checkpoint_dir), *argv]  # fmt: skip
        if name in self.cpus:
            argv = ["taskset", "--cpu-list", self.cpus[name], *argv]
        if name in self.memory:
            group = memory_cgroup(
                f"tfjob-{name}-{os.getpid()}-{self.starts[name]}", self.memory[name]
            )
            self.cgroups.append(group)
            join = 'echo $$ > "$0/cgroup.procs" && exec "$@"'
            argv = ["sh", "-c", join, str(group), *argv]
        with open(log, "wb") as out:
            popen = subprocess.Popen(
                argv,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                start_new_session=True,
            )
        self.procs[name] = Proc(name, popen, log)
        return self.procs[name]

    def termination_log(self, name: str) -> Path:
        """The termination message file of task `name` ("worker-1"), its latest run's."""
        return self.workdir / f"{name}.termination"

    def start_all(self, extra: list[str] | None = None) -> None:
        for task_type, n in self.replicas.items():
            for i in range(n):
                self.start(task_type, i, extra)

    def wait(self, name: str, timeout: float = 300) -> Proc:
        """Wait for one task to exit; fail with its log if it takes longer than `timeout`."""
        proc = self.procs[name]
        try:
            proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{name} still running after {timeout}s:\n{proc.tail()}") from None
        return proc

    def wait_for_line(self, name: str, text: str, timeout: float = 300) -> None:
        proc = self.procs[name]
        deadline = time.monotonic() + timeout
        while text not in proc.output():
            if proc.popen.poll() is not None:
                raise AssertionError(f"{name} exited before printing {text!r}:\n{proc.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} did not print {text!r} in {timeout}s")
            time.sleep(0.1)

    def kill(self, name: str, sig: int = signal.SIGKILL, group: bool = True) -> None:
        """Signal a task's process group, or its first process alone as the kubelet signals a
        container's PID 1 (`group` False); a SIGKILL also waits for the exit."""
        proc = self.procs[name]
        if proc.popen.poll() is None:
            (os.killpg if group else os.kill)(proc.popen.pid, sig)
            if sig == signal.SIGKILL:
                proc.popen.wait(30)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.kill(name)
        for group in self.cgroups:
            with contextlib.suppress(OSError):
                group.rmdir()


def memory_cgroup(name: str, limit: int) -> Path:
    """A child of this process's memory cgroup (v1 or v2) limited to `limit` bytes."""
    root = Path("/sys/fs/cgroup")
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if "memory" in controllers.split(","):
            group = root / "memory" / path.lstrip("/") / name
            group.mkdir()
            (group / "memory.limit_in_bytes").write_text(str(limit))
            return group
        if hierarchy == "0" and not controllers and (root / "cgroup.controllers").exists():
            group = root / path.lstrip("/") / name
            group.mkdir()
            (group / "memory.max").write_text(str(limit))
            return group
    raise RuntimeError("no memory cgroup to limit a task with")


def _values(log_dir: Path) -> Iterator[tuple[int, Any]]:
    files = sorted(log_dir.glob("events.out.tfevents.*"))
    assert files, f"no event files in {log_dir}"
    for path in files:
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                yield event.step, value


def kind(value: Any) -> str:
    """scalars, histograms or images: what TensorBoard's dashboards make of a summary value."""
    if value.HasField("histo"):
        return "histograms"
    if value.HasField("image"):
        return "images"
    if value.HasField("tensor"):
        return value.metadata.plugin_data.plugin_name or "tensor"
    return "scalars"


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in a TensorBoard log directory, read back from the event files."""
    out: dict[str, list[tuple[int, float]]] = {}
    for step, value in _values(log_dir):
        if kind(value) != "scalars":
            continue
        number = (
            float(tf.make_ndarray(value.tensor)) if value.HasField("tensor") else value.simple_value
        )
        out.setdefault(value.tag, []).append((step, number))
    return out


def details(log_dir: Path) -> dict[str, dict[str, list[int]]]:
    """The histogram and image tags of a log directory, with the steps each was written at:
    {"histograms": {tag: [steps]}, "images": {tag: [steps]}}."""
    out: dict[str, dict[str, list[int]]] = {"histograms": {}, "images": {}}
    for step, value in _values(log_dir):
        k = kind(value)
        if k in out:
            tag = value.tag.split("/image/")[0]  # v1 image protos: one tag per image
            steps = out[k].setdefault(tag, [])
            if step not in steps:
                steps.append(step)
    return out
