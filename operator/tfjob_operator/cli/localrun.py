"""`tfjob run`: a TFJob on this machine, one process per replica and index, no cluster.

It uses the operator's own pieces: the same parsing and validation (so the same messages), the
same TF_CONFIG builder (with 127.0.0.1 addresses), and the same lifecycle rules (`decide`), fed
with the local processes as if they were pods. Only starting, watching and stopping processes
is its own.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from tfjob_operator.api.spec import ReplicaType
from tfjob_operator.cli.output import is_chatter, line_prefix, summary_lines
from tfjob_operator.rules import naming, tfconfig
from tfjob_operator.rules import status as st
from tfjob_operator.rules.children import (
    ENV_CHECKPOINT_DIR,
    ENV_JOB_NAME,
    ENV_REPLICA_TYPE,
    OPERATOR_ENV,
    mounts_checkpoint,
    tensorflow_container_index,
)
from tfjob_operator.rules.lifecycle import JobView, decide
from tfjob_operator.rules.pods import Exit, PodObservation
from tfjob_protocol.local import ENV_LOCAL_PARENT
from tfjob_protocol.result import Result, parse_last

DEFAULT_ENTRYPOINT = [sys.executable, "-m", "tfjob_trainer"]
# The cluster domain the rules are given: no DNS name they make is ever resolved here.
LOCAL_DOMAIN = "local"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Task:
    """One local process standing in for one pod; restarted like a StatefulSet pod."""

    rt: ReplicaType
    index: int
    argv: list[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    last_exit: Exit | None = None
    exit: Exit | None = None
    restart_at: float = 0.0
    result: Result | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.rt.task_type}-{self.index}"

    def observation(self, job: str) -> PodObservation:
        return PodObservation(
            name=naming.pod_name(job, self.rt, self.index),
            uid=f"local-{self.name}",
            replica_type=self.rt,
            index=self.index,
            running=self.proc is not None and self.exit is None,
            exit=self.exit,
            last_exit=self.last_exit,
            restart_count=self.restarts,
        )


class Runner:
    def __init__(
        self,
        body: dict[str, Any],
        workdir: Path,
        out: TextIO = sys.stdout,
        entrypoint: list[str] | None = None,
        verbose: bool = False,
    ) -> None:
        self.body = body
        self.view = JobView.from_body(body, LOCAL_DOMAIN)
        self.workdir = workdir
        self.out = out
        self.colour = out.isatty()
        self.entrypoint = entrypoint or DEFAULT_ENTRYPOINT
        self.verbose = verbose
        self.tasks: list[Task] = []
        self.status: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.started = time.monotonic()

    def say(self, text: str) -> None:
        with self.lock:
            self.out.write(text + "\n")
            self.out.flush()

    def plan(self) -> None:
        """One task per replica and index, with the env the operator would give its pod."""
        spec, job = self.view.spec, self.view.ref
        assert spec is not None
        replicas = spec.replicas()
        ports = {rt: [free_port() for _ in range(rs.replicas)] for rt, rs in replicas.items()}
        cluster = tfconfig.cluster_map(
            {rt: rs.replicas for rt, rs in replicas.items()},
            lambda rt, i: f"127.0.0.1:{ports[rt][i]}",
        )
        checkpoints = self.workdir / "checkpoints"
        for rt, rs in replicas.items():
            container = rs.template["spec"]["containers"][tensorflow_container_index(rs.template)]
            command = list(container.get("command") or [])
            if not command:
                self.say(
                    f"[tfjob] {rt.value}: image {container.get('image')!r} is not run "
                    f"here; running {' '.join(self.entrypoint)} with its args"
                )
                command = list(self.entrypoint)
            elif command[0] in ("python", "python3"):
                command[0] = sys.executable
            user_env = {
                e["name"]: str(e.get("value", ""))
                for e in container.get("env") or []
                if "value" in e and e["name"] not in OPERATOR_ENV
            }
            for i in range(rs.replicas):
                view: tfconfig.Cluster = cluster
                if spec.enable_dynamic_worker:
                    own = f"127.0.0.1:{ports[rt][i]}"
                    view = tfconfig.sparse_cluster(cluster, rt, str(i), own)
                env = {
                    **os.environ,
                    **user_env,
                    tfconfig.ENV_TASK_INDEX: str(i),
                    tfconfig.ENV_TF_CONFIG: tfconfig.tf_config(view, rt, i),
                    ENV_JOB_NAME: job.name,
                    ENV_REPLICA_TYPE: rt.task_type,
                    ENV_LOCAL_PARENT: str(os.getpid()),
                    "PYTHONUNBUFFERED": "1",
                }
                if self.verbose and "TF_CPP_MIN_LOG_LEVEL" not in user_env:
                    env["TF_CPP_MIN_LOG_LEVEL"] = "0"  # all of it (the trainer's default is 2)
                if mounts_checkpoint(rt):
                    # Always, also with no `checkpoint:` section (Kubeflow manifests have none):
                    # here a directory costs nothing, and without one nothing could resume.
                    env[ENV_CHECKPOINT_DIR] = str(checkpoints)
                argv = command + [str(a) for a in container.get("args") or []]
                self.tasks.append(Task(rt, i, argv, env))

    def start(self, task: Task) -> None:
        task.exit = None
        task.proc = subprocess.Popen(
            task.argv,
            env=task.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        threading.Thread(target=self._pump, args=(task, task.proc), daemon=True).start()

    def _pump(self, task: Task, proc: subprocess.Popen[bytes]) -> None:
        prefix = line_prefix(task.name, self.tasks.index(task), self.colour)
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            if (result := parse_last(line)) is not None:
                task.result = result
            if self.verbose or not is_chatter(line):
                self.say(prefix + line)

    def step(self) -> st.Status:
        """Reap exits, restart what a StatefulSet would, and apply the lifecycle rules."""
        now = time.monotonic()
        for task in self.tasks:
            if task.proc is not None and task.exit is None and task.proc.poll() is not None:
                task.exit = Exit(
                    task.proc.returncode, "Completed" if task.proc.returncode == 0 else "Error"
                )
                task.restart_at = now + min(10.0, 2.0**task.restarts)
        decision = decide(
            self.view.with_status(self.status),
            [t.observation(self.view.ref.name) for t in self.tasks],
            datetime.now(UTC),
            LOCAL_DOMAIN,
        )
        for _type, reason, message in decision.events:
            self.say(f"[tfjob] {reason}: {message}")
        self.status = decision.status
        if not st.is_finished(self.status):
            for task in self.tasks:
                if task.exit is not None and now >= task.restart_at:
                    task.last_exit, task.restarts = task.exit, task.restarts + 1
                    self.start(task)
        return self.status

    def stop(self) -> None:
        """Terminate every process group; kill what does not go within a few seconds."""
        live = [t.proc for t in self.tasks if t.proc is not None and t.proc.poll() is None]
        for proc in live:
            _signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in live:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal(proc, signal.SIGKILL)
                proc.wait()

    def run(self) -> int:
        if self.view.spec is None:
            self.say("tfjob: invalid TFJob: " + "; ".join(self.view.problems))
            return 2
        for warning in self.view.warnings:
            self.say(f"[tfjob] warning: {warning}")
        try:
            self.workdir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            self.say(f"tfjob: cannot use --workdir {self.workdir}: {e.strerror}")
            return 2
        self.plan()
        # The trainer, by default or named in the manifest (`python` is this interpreter here).
        trainer = DEFAULT_ENTRYPOINT
        if any(t.argv[: len(trainer)] == trainer for t in self.tasks) and not (
            importlib.util.find_spec("tensorflow")
        ):
            self.say(
                "tfjob: the trainer needs TensorFlow, which this Python lacks: "
                "pip install 'tfjob-operator[trainer]'"
            )
            return 2
        for task in self.tasks:
            self.start(task)
        try:
            while not st.is_finished(self.step()):
                time.sleep(0.2)
        finally:
            self.stop()
        self.summary()
        return 0 if st.is_true(self.status, st.Cond.SUCCEEDED) else 1

    def summary(self) -> None:
        logs = self.workdir / "checkpoints" / "logs"
        self.say("")
        for line in summary_lines(
            self.status,
            time.monotonic() - self.started,
            [t.result for t in self.tasks],
            checkpoints=self.workdir / "checkpoints",
            tensorboard=f"tensorboard --logdir {logs}",
        ):
            self.say(line)


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)
