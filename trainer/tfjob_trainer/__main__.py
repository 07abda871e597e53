"""`tfjob-trainer` / `python -m tfjob_trainer`: train as the task TF_CONFIG names.

Exit codes: 0 when this task's work is done; 2 for a configuration that cannot work (one line
says why, and the code is below 128 so the operator's ExitCode policy fails fast); 201 when
stopped on request (SIGTERM), after saving (`runtime.stopping`); 200 when a peer was lost;
anything else is a runtime failure.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tfjob_protocol.local import ENV_LOCAL_PARENT
from tfjob_protocol.result import Result

from . import STARTED, TaskFailed, UsageError, config, options
from .output.task_result import line
from .runtime.exit_codes import EXIT_CONFIG, EXIT_PEER_LOST, exit_now
from .runtime.stopping import STOP, leave
from .runtime.supervisor import parent_death_signal, supervised
from .strategies import registry

log = logging.getLogger("tfjob_trainer")


def entry() -> int:
    """The command: this task under a supervisor of its own (`runtime.supervisor`), so that a
    stop ends it within seconds even where TensorFlow holds it."""
    follow_local_parent()
    return supervised(main)


def main(argv: list[str] | None = None) -> int:
    # Stopped (a pod deleted or scaled down): leave at once until a training loop saves on a
    # stop (`runtime.stopping`). As PID 1 of a container the trainer would otherwise ignore
    # SIGTERM until SIGKILL.
    STOP.arm()
    # Our own lines at INFO; TensorFlow's chatter only from WARNING up.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    log.setLevel(logging.INFO)
    logging.getLogger("tensorflow").setLevel(logging.ERROR)  # e.g. saver retracing notices
    try:
        opts = options.parse(argv)
        task = config.parse(os.environ.get("TF_CONFIG"))
        strategy = config.resolve_strategy(opts.strategy, task)
        check_evaluator(opts, task, strategy)
        check_plugins(opts, strategy)
    except (config.ConfigError, ValueError) as e:
        print(f"tfjob-trainer: configuration error: {e}", file=sys.stderr, flush=True)
        return EXIT_CONFIG
    if importlib.util.find_spec("tensorflow") is None:
        print(
            "tfjob-trainer: TensorFlow is not installed: pip install 'tfjob-operator[trainer]'",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_CONFIG
    if not opts.has_checkpoint_dir and writes_checkpoints(task, strategy):
        opts = scratch_checkpoints(opts)
    if task is not None:
        os.environ["TF_CONFIG"] = task.tf_config()  # what TensorFlow reads: index filled in
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if strategy == config.PARAMETER_SERVER:
        os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")  # failures reach the coordinator
    role = "local" if task is None else f"{task.type}:{task.index}"
    try:
        summary = run(opts, task, strategy)
    except KeyboardInterrupt:
        return 130
    except UsageError as e:
        # Found once TensorFlow runs (a function that does not import, an input that does not
        # fit the model): the user's to fix, in one line, not a retry.
        print(f"tfjob-trainer: {e}", file=sys.stderr, flush=True)
        exit_now(EXIT_CONFIG)
    except TaskFailed as e:
        log.error("%s %s", role, e)
        exit_now(EXIT_PEER_LOST)  # at once: peers waiting on this task learn of it from its exit
    except Exception:
        log.exception("%s failed", role)
        return 1
    if summary is not None:
        print(line(role, summary), flush=True)
        exit_now(0)
    return 0


def follow_local_parent() -> None:
    """Started by `tfjob run`: be sent SIGTERM when it dies, however it dies (Linux's parent-
    death signal). Only as its direct child: under a wrapper of the user's, the wrapper's own
    exit would stop the task."""
    parent = os.environ.get(ENV_LOCAL_PARENT, "")
    if not parent.isdigit() or os.getppid() != int(parent) or not sys.platform.startswith("linux"):
        return
    parent_death_signal(signal.SIGTERM)
    if os.getppid() != int(parent):  # it died before prctl took hold
        log.info("stopped: the local runner is gone")
        leave(None)


def check_evaluator(opts: options.Options, task: config.Task | None, strategy: str) -> None:
    """The evaluator only follows the checkpoints the training writes: it needs to see them."""
    if task is None or task.type != "evaluator":
        return
    if not opts.has_checkpoint_dir:
        raise config.ConfigError(
            "the evaluator follows the training's checkpoints: give it the chief's "
            "--checkpoint-dir (or TFJOB_CHECKPOINT_DIR; in a TFJob, add a checkpoint: section)"
        )
    if strategy == config.BETWEEN_GRAPH:
        raise config.ConfigError(
            "the evaluator reads TF2 checkpoints; between-graph writes "
            "TF1 ones: drop the Evaluator or use another strategy"
        )


def check_plugins(opts: options.Options, strategy: str) -> None:
    """Between-graph training runs TF1 graphs, where Keras 3 models cannot be built: only the
    built-in MNIST model and input have a graph-mode form."""
    if strategy == config.BETWEEN_GRAPH and not (opts.builtin_model and opts.builtin_input):
        raise config.ConfigError(
            "between-graph (TF1 graph mode) trains only the built-in MNIST models: Keras 3 "
            "cannot build a model in graph mode. Use --strategy parameter-server (the same "
            "asynchronous ps/worker topology) or multi-worker-mirrored"
        )


def writes_checkpoints(task: config.Task | None, strategy: str) -> bool:
    """Parameter servers and workers that only serve write nothing; the evaluator only reads."""
    if task is None:
        return True
    if task.type == "evaluator":
        return False
    if strategy == config.PARAMETER_SERVER:
        return task.type in config.CHIEF_TYPES
    if strategy == config.BETWEEN_GRAPH:
        return task.is_chief
    return True


def scratch_checkpoints(opts: options.Options) -> options.Options:
    """Without a checkpoint directory, train anyway into a private temporary one: every save,
    summary and export runs as usual and the result line names files that exist. Nothing
    there is shared or survives the pod, so a restart cannot resume: say so, once."""
    scratch = Path(tempfile.mkdtemp(prefix="tfjob-checkpoints-"))
    written = "checkpoints and TensorBoard logs"
    if not opts.export_dir_given:
        written = "checkpoints, TensorBoard logs and the export"
    log.warning(
        "no checkpoint directory (--checkpoint-dir or TFJOB_CHECKPOINT_DIR): %s go to the "
        "temporary %s, so a restarted replica starts again from step 0 and cannot resume",
        written,
        scratch,
    )
    return opts.with_checkpoint_dir(scratch)


class StartUp:
    """Where a task's start-up goes, part by part, so that a slow first step on a cluster can
    be split into what the trainer spends (peers, data, TensorFlow's import) and what the node
    spent before the process existed. Times count from the trainer package's import, the
    first thing the process does; `started_at` puts that on the wall clock, which a benchmark
    compares with the API server's view of the pod."""

    def __init__(self) -> None:
        self.started_at = time.time() - (time.perf_counter() - STARTED)
        self.parts: dict[str, float] = {}

    @contextlib.contextmanager
    def part(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.parts[name] = time.perf_counter() - began

    def line(self) -> str:
        """One line, e.g. `start-up: import 3.10 s, data 0.62 s, peers 0.01 s; ready 3.80 s
        after process start (1764000000.123456)`."""
        parts = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self.parts.items())
        ready = time.perf_counter() - STARTED
        return f"start-up: {parts}; ready {ready:.2f} s after process start ({self.started_at:.6f})"


def run(opts: options.Options, task: config.Task | None, strategy: str) -> Result | None:
    """Do this task's part; return the result to print (None for tasks that only serve)."""
    log.info(
        "role %s, strategy %s", "local" if task is None else f"{task.type}:{task.index}", strategy
    )
    clock = StartUp()
    evaluator = task is not None and task.type == "evaluator"
    # TensorFlow's import and the data first, the wait for peers last: nothing before needs
    # the peers, and they appear meanwhile. Waiting first left every task idle for the DNS
    # records of the others (a large share of the chief's time to its first step on the real
    # node) before each started its own CPU-bound work.
    with clock.part("import"), _hidden("sklearn"):
        runner = registry.runner(registry.EVALUATOR if evaluator else strategy)
        from .runtime import threads

        # Before TensorFlow's first op (a user's module may run one).
        threads.configure(clustered=task is not None)
        check_functions(opts, task)
    with clock.part("data"):
        from .data import mnist

        files = mnist.prepare(opts.dataset, opts.data_dir) if reads_mnist(opts, task) else None
    if files is not None:
        log.info(
            "data: %s (%d train, %d test examples)", files.source, files.train_size, files.test_size
        )
    if task is not None:
        with clock.part("peers"):
            config.wait_for_peers(task, opts.peer_timeout)
    log.info("%s", clock.line())
    summary = runner(opts, files, task)
    if summary is not None and summary.get("first_step_sec") is not None:
        log.info("start-up: first step %.2f s after process start", summary["first_step_sec"])
    return summary


def reads_mnist(opts: options.Options, task: config.Task | None) -> bool:
    """Whether this task reads the built-in data: not a parameter server, not a task whose
    inputs (the evaluator's is --eval-input) are the user's."""
    if task is not None and task.type == "ps":
        return False
    if task is not None and task.type == "evaluator":
        return opts.eval_input is None
    return opts.builtin_input


def check_functions(opts: options.Options, task: config.Task | None) -> None:
    """Import the user's functions and check their arguments before waiting for any peer: a
    typo fails this task in seconds, not after the cluster has formed. Parameter servers run
    no user code."""
    if task is not None and task.type == "ps":
        return
    evaluator = task is not None and task.type == "evaluator"
    if evaluator and opts.eval_input is None and not opts.builtin_input:
        raise UsageError(
            f"the Evaluator needs --eval-input for {opts.model}: a function returning one "
            "pass over the evaluation data"
        )
    from .model import build, trainable

    build.model_plugin(opts)
    trainable.input_plugin(opts)
    trainable.input_plugin(opts, "eval-input")


@contextlib.contextmanager
def _hidden(module: str) -> Iterator[None]:
    """Import with `module` missing, unless something imported it already. Keras imports
    scikit-learn, when it is installed, for wrappers the trainer never uses: a sizeable part of
    TensorFlow's import, in every task. Afterwards `module` imports as usual (the digits
    dataset needs scikit-learn)."""
    if module in sys.modules:
        yield
        return
    sys.modules[module] = None  # type: ignore[assignment]  # makes `import module` fail
    try:
        yield
    finally:
        if module in sys.modules and sys.modules[module] is None:
            del sys.modules[module]


if __name__ == "__main__":
    sys.exit(entry())
