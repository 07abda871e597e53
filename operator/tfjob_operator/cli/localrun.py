"""`tfjob run`: a TFJob on this machine, one process per replica and index, no cluster.

It uses the operator's own pieces: the same parsing and validation (so the same messages), the
same TF_CONFIG builder (with 127.0.0.1 addresses), and the same lifecycle rules (`decide`), fed
with the local processes as if they were pods. Only starting, watching and stopping processes
is its own.

Processes are stopped as the kubelet stops a pod's container: SIGTERM to the task's first
process, SIGKILL to its process group once the grace period the operator would give its pod is
over (`children.grace_period`, also in its env). Ctrl-C or SIGTERM to `tfjob run` is a stop on
request of the whole job: every task is stopped at once, the chief saves the step it is on and
says so in its termination message (a file per task here, `ENV_TERMINATION_LOG`), and
`tfjob run` exits with `EXIT_STOPPED`, no failure, as on a cluster. A second one kills them now.

Exit codes: 0 when the job succeeded; 1 when it failed; 2 when it cannot run (an invalid
manifest, no TensorFlow, an unusable --workdir); `EXIT_STOPPED` (201) when stopped on request
before it finished (`exit_code`).
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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from tfjob_operator.api.spec import ReplicaType
from tfjob_operator.cli.printing import is_chatter, line_prefix, summary_lines
from tfjob_operator.rules import naming, tfconfig
from tfjob_operator.rules import status as st
from tfjob_operator.rules.children import (
    ENV_CHECKPOINT_DIR,
    ENV_JOB_NAME,
    ENV_REPLICA_TYPE,
    OPERATOR_ENV,
    grace_period,
    mounts_checkpoint,
    tensorflow_container_index,
)
from tfjob_operator.rules.lifecycle import JobView, decide
from tfjob_operator.rules.pods import MESSAGE_LIMIT, Exit, PodObservation
from tfjob_protocol.local import ENV_LOCAL_PARENT
from tfjob_protocol.result import Result, parse_last
from tfjob_protocol.stop import ENV_GRACE_PERIOD, ENV_TERMINATION_LOG, EXIT_STOPPED

DEFAULT_ENTRYPOINT = [sys.executable, "-m", "tfjob_trainer"]
# The cluster domain the rules are given: no DNS name they make is ever resolved here.
LOCAL_DOMAIN = "local"
# How long the summary waits for the last lines of tasks that have ended.
DRAIN_SECS = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class LocalTask:
    """One local process standing in for one pod; restarted like a StatefulSet pod."""

    rt: ReplicaType
    index: int
    argv: list[str]
    env: dict[str, str]
    # Its pod's terminationGracePeriodSeconds: from SIGTERM to SIGKILL.
    grace: int
    # Its termination message file, as the kubelet's is in a pod: the step a stop saved.
    termination: Path
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    last_exit: Exit | None = None
    exit: Exit | None = None
    restart_at: float = 0.0
    result: Result | None = None
    lines: list[str] = field(default_factory=list)
    pumps: list[threading.Thread] = field(default_factory=list)
    killed: str = ""  # why its stop ended in SIGKILL, if it did

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


class LocalRunner:
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
        self.tasks: list[LocalTask] = []
        self.status: dict[str, Any] = {}
        self.lock = threading.Lock()
        self.started = time.monotonic()
        self.stopping = False  # Ctrl-C or SIGTERM: stop the job
        self.hurry = False  # once more: kill every task now
        self.cause = ""

    def interrupt(self, signum: int, _frame: object) -> None:
        """The handler of SIGINT and SIGTERM: the first asks for a stop, the next one for the
        tasks' end now. It only sets plain attributes, no lock taken: the main thread, which
        it interrupts, may hold the output's lock, or be inside this handler (a second signal
        close behind the first)."""
        self.hurry = self.stopping
        self.cause = self.cause or signal.Signals(signum).name
        self.stopping = True

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
            grace = grace_period(rs.template, spec.run_policy.termination_grace_period_seconds)
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
                    ENV_GRACE_PERIOD: str(grace),
                    "PYTHONUNBUFFERED": "1",
                }
                if self.verbose and "TF_CPP_MIN_LOG_LEVEL" not in user_env:
                    env["TF_CPP_MIN_LOG_LEVEL"] = "0"  # all of it (the trainer's default is 2)
                if mounts_checkpoint(rt):
                    # Always, also with no `checkpoint:` section (Kubeflow manifests have none):
                    # here a directory costs nothing, and without one nothing could resume.
                    env[ENV_CHECKPOINT_DIR] = str(checkpoints)
                termination = self.workdir / "tasks" / f"{rt.task_type}-{i}.termination-log"
                env[ENV_TERMINATION_LOG] = str(termination)
                argv = command + [str(a) for a in container.get("args") or []]
                self.tasks.append(LocalTask(rt, i, argv, env, grace, termination))

    def start(self, task: LocalTask) -> None:
        task.exit = None
        # Empty for each run, as the kubelet gives each container: no message of a run before.
        task.termination.parent.mkdir(parents=True, exist_ok=True)
        task.termination.write_text("")
        task.proc = subprocess.Popen(
            task.argv,
            env=task.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        pump = threading.Thread(target=self._pump, args=(task, task.proc), daemon=True)
        task.pumps = [*[t for t in task.pumps if t.is_alive()], pump]
        pump.start()

    def _pump(self, task: LocalTask, proc: subprocess.Popen[bytes]) -> None:
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
            if self._reap(task):
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

    def _reap(self, task: LocalTask) -> bool:
        """Whether the task's process has just ended; its exit as a container's, with its
        termination message."""
        if task.proc is None or task.exit is not None or task.proc.poll() is None:
            return False
        try:
            message = task.termination.read_text(errors="replace")
        except OSError:
            message = ""
        task.exit = exit_of(task.proc.returncode, message)
        return True

    def stop(self) -> list[LocalTask]:
        """Stop every task as the kubelet stops a pod's container, all at once: SIGTERM to its
        first process (the trainer's supervisor passes it on), SIGKILL to its process group
        once its grace period is over (at once on a second interrupt), and to what it leaves
        behind. The tasks it stopped, their exits reaped."""
        live = [t for t in self.tasks if t.proc is not None and t.proc.poll() is None]
        begun = time.monotonic()
        for task in live:
            assert task.proc is not None
            _signal(task.proc, signal.SIGTERM, group=False)
        waiting = list(live)
        while waiting:
            now = time.monotonic()
            for task in waiting:
                assert task.proc is not None
                if task.proc.poll() is not None:
                    continue
                if self.hurry:
                    task.killed = f"killed on a second {self.cause or 'interrupt'}"
                elif now >= begun + task.grace:
                    task.killed = f"killed after its grace period of {task.grace} s"
                else:
                    continue
                _signal(task.proc, signal.SIGKILL)
                task.proc.wait()
            waiting = [t for t in waiting if t.proc is not None and t.proc.poll() is None]
            if waiting:
                time.sleep(0.1)
        for task in live:
            assert task.proc is not None
            _signal(task.proc, signal.SIGKILL)  # what it left in its group: a container's end
            self._reap(task)
        return live

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
            while not st.is_finished(self.step()) and not self.stopping:
                time.sleep(0.2)
        finally:
            on_request = self.stopping and not st.is_finished(self.status)
            if on_request:
                grace = max(t.grace for t in self.tasks)
                self.say(
                    f"[tfjob] {self.cause}: stopping every task as a cluster stops its pods "
                    f"(SIGTERM, SIGKILL after {grace} s): the trainer's chief saves the step "
                    "it is on. Once more to kill them now."
                )
            stopped = self.stop()
        self.drain()
        stop = None
        if on_request:
            step = saved_step(t.exit for t in stopped)
            unclean = [u for t in stopped if (u := unclean_exit(t.name, t.exit, t.killed))]
            job = f"{self.view.ref.namespace}/{self.view.ref.name}"
            stop = (stop_message(job, step, unclean), step)
        self.summary(stop)
        return exit_code(self.status, on_request)

    def drain(self) -> None:
        """Wait a little for the last lines of the tasks that ended, so that the summary comes
        after them (a process that left a child holding its output is not waited for)."""
        deadline = time.monotonic() + DRAIN_SECS
        for task in self.tasks:
            for pump in task.pumps:
                pump.join(max(0.0, deadline - time.monotonic()))

    def summary(self, stop: tuple[str, int | None] | None = None) -> None:
        """The closing summary; `stop`: the job was stopped on request, with this message and
        the step saved."""
        logs = self.workdir / "checkpoints" / "logs"
        self.say("")
        for line in summary_lines(
            self.status,
            time.monotonic() - self.started,
            [t.result for t in self.tasks],
            checkpoints=self.workdir / "checkpoints",
            tensorboard=f"tensorboard --logdir {logs}",
            stopped=stop,
        ):
            self.say(line)


def exit_of(returncode: int, message: str = "") -> Exit:
    """A process's end as a container's, as the rules read a pod's: a signal's as 128 + its
    number (Popen says -N), the termination message cut as the operator cuts a pod's."""
    code = 128 - returncode if returncode < 0 else returncode
    return Exit(code, "Completed" if code == 0 else "Error", message[:MESSAGE_LIMIT])


def saved_step(exits: Iterable[Exit | None]) -> int | None:
    """The step a stop saved: the newest a stopped task names (the chief's; MultiWorkerMirrored's
    workers save together and all name it), as the operator takes status.lastStop.savedStep."""
    return max((e.saved_step for e in exits if e and e.saved_step is not None), default=None)


def unclean_exit(name: str, ended: Exit | None, killed: str = "") -> str:
    """How a task did not leave as a stop asks, for the summary ("" when it did: stopped, or
    done before): a stop that loses the chief's save says so, not only what it saved."""
    if killed:
        return f"{name} ({killed})"
    if ended is None or ended.stopped or ended.code == 0:
        return ""
    return f"{name} (exit code {ended.code})"


def stop_message(job: str, step: int | None, unclean: Sequence[str] = ()) -> str:
    """The summary's word on a job stopped on request: the step saved, from which the next run
    in the same --workdir resumes, as the operator's `Stopped` Event says on a cluster."""
    if step is not None:
        text = (
            f"TFJob {job} stopped at step {step}, saved; run it again with this --workdir to "
            f"resume from step {step}."
        )
    else:
        text = (
            f"TFJob {job} stopped with nothing saved; run it again with this --workdir to "
            "resume from its newest checkpoint, if any."
        )
    if unclean:
        text += " Not stopped cleanly: " + ", ".join(unclean) + "."
    return text


def exit_code(status: st.Status, stopped: bool) -> int:
    """0 when the job succeeded, 1 when it failed. Stopped on request before it finished,
    `EXIT_STOPPED`: no failure, as a stop never is on a cluster, and the code a stopped task
    gives, above 128 as a signal's exit is, so that a wrapper that retries signals retries it."""
    if stopped and not st.is_finished(status):
        return EXIT_STOPPED
    return 0 if st.is_true(status, st.Cond.SUCCEEDED) else 1


def _signal(proc: subprocess.Popen[bytes], sig: int, group: bool = True) -> None:
    """Signal the process group (every process of the task, as a container's), or the
    task's first process alone (`group` False: the container's PID 1)."""
    with contextlib.suppress(ProcessLookupError):
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
