"""Command-line flags, each with an environment fallback so a pod template can use either."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import plugins
from .config import STRATEGIES


@dataclass(frozen=True)
class Options:
    checkpoint_dir: Path
    data_dir: Path | None
    dataset: str
    model: str
    hidden_units: int
    steps: int
    batch_size: int
    learning_rate: float
    strategy: str
    sync: bool
    checkpoint_every: int
    log_every: int
    export_dir: Path
    steps_per_call: int | None  # None: per_call() chooses
    cpu_devices: int
    peer_timeout: float
    eval_timeout: float
    stall_timeout: float = 60.0
    export_dir_given: bool = False
    histogram_every: int = 500
    # Users' own code (`plugins`): None for the built-in MNIST input.
    model_args: dict[str, Any] = field(default_factory=dict)
    input: str | None = None
    input_args: dict[str, Any] = field(default_factory=dict)
    eval_input: str | None = None
    loss: str | None = None
    optimizer: str = "adam"
    metrics: tuple[str, ...] = ()
    learning_rate_given: bool = False  # a --model function's own default holds otherwise
    metrics_file: Path | None = None  # the chief appends `step=N loss=X ...` lines (Katib)

    @property
    def model_spec(self) -> str:
        """`package.module:function` of the model, the built-in ones included."""
        return plugins.BUILTIN_MODELS.get(self.model, self.model)

    @property
    def builtin_model(self) -> bool:
        return self.model in plugins.BUILTIN_MODELS

    @property
    def builtin_input(self) -> bool:
        """MNIST, digits or synthetic, prepared by `data.mnist.prepare`."""
        return self.input is None

    @property
    def has_checkpoint_dir(self) -> bool:
        return str(self.checkpoint_dir) not in ("", ".")

    def with_checkpoint_dir(self, directory: Path) -> Options:
        """The same options writing to `directory`; the export follows unless set apart."""
        export_dir = self.export_dir if self.export_dir_given else directory / "export"
        return replace(self, checkpoint_dir=directory, export_dir=export_dir)

    def per_call(self, one_device: bool) -> int:
        """Steps per call: on one device nothing waits for a call's end but the log line, and
        longer calls run faster on the small MLP; across workers a call is the unit of work
        handed out and redone after a failure, so it stays small."""
        if self.steps_per_call is not None:
            return self.steps_per_call
        return 100 if one_device else 10

    @property
    def log_dir(self) -> Path:
        return self.checkpoint_dir / "logs"


# (flag, argparse settings, help). Every flag falls back to env TFJOB_<FLAG>, e.g. TFJOB_STEPS.
_FLAGS: list[tuple[str, dict[str, Any], str]] = [
    ("checkpoint-dir", {}, "checkpoints, TensorBoard logs and the export"),
    ("data-dir", {}, "the data --input reads, or where MNIST may be (IDX files or mnist.npz)"),
    (
        "dataset",
        {"choices": ("mnist", "digits", "synthetic"), "default": "mnist"},
        "the built-in input's data, when there is no --input",
    ),
    (
        "model",
        {"default": "mlp"},
        "mlp (784-<hidden-units>-10) or cnn on MNIST, or package.module:function returning your "
        "keras.Model, compiled (or give --loss)",
    ),
    (
        "model-arg",
        {"action": "append", "metavar": "KEY=VALUE"},
        "a keyword argument of the --model function, repeatable; values parse as JSON or stay "
        "strings",
    ),
    (
        "input",
        {},
        "package.module:function taking a tf.distribute.InputContext and returning a repeated "
        "tf.data.Dataset of (features, labels) batches, per replica (gets batch_size and "
        "data_dir when it has those parameters)",
    ),
    ("input-arg", {"action": "append", "metavar": "KEY=VALUE"}, "a keyword argument of --input"),
    (
        "eval-input",
        {},
        "like --input, for the Evaluator and the chief's final evaluation: one pass over the "
        "evaluation data (takes the --input-arg arguments it has parameters for)",
    ),
    ("loss", {}, "a Keras loss (e.g. mse) to compile a --model that comes uncompiled"),
    ("optimizer", {"default": "adam"}, "a Keras optimizer name, with --loss"),
    ("metrics", {}, "comma-separated Keras metrics, with --loss (e.g. mae)"),
    ("hidden-units", {"type": int, "default": "500"}, "width of the mlp's hidden layer"),
    ("steps", {"type": int, "default": "1000"}, "global steps to train"),
    ("batch-size", {"type": int, "default": "100"}, "examples per replica per step"),
    ("learning-rate", {"type": float, "default": "0.001"}, "Adam's learning rate"),
    ("strategy", {"choices": STRATEGIES, "default": "auto"}, ""),
    (
        "sync",
        {"action": "store_true"},
        "between-graph only: aggregate gradients with SyncReplicasOptimizer",
    ),
    ("checkpoint-every", {"type": int, "default": "500"}, "steps between checkpoints"),
    ("log-every", {"type": int, "default": "100"}, "steps between log lines and summaries"),
    (
        "histogram-every",
        {"type": int, "default": "500"},
        "steps between TensorBoard histograms of the weights (and the first report)",
    ),
    ("export-dir", {}, "where the chief exports the model; default <checkpoint-dir>/export"),
    (
        "metrics-file",
        {},
        "the chief appends a `step=N loss=X` line (and its metrics) at each report, for "
        "Katib's File metrics collector (docs/katib.md)",
    ),
    (
        "steps-per-call",
        {"type": int},
        "steps inside one tf.function call or scheduled closure (default 100 on one device, "
        "10 across devices and workers)",
    ),
    (
        "cpu-devices",
        {"type": int, "default": "0"},
        "mirrored only: split the CPU into this many logical devices, to try multi-device "
        "training without GPUs",
    ),
    (
        "peer-timeout",
        {"type": float, "default": "600"},
        "seconds to wait for every peer to resolve and answer",
    ),
    (
        "stall-timeout",
        {"type": float, "default": "60"},
        "parameter servers: seconds without a finished closure, while every peer answers, "
        "after which the chief restarts to drop a connection to a replaced peer (0: never)",
    ),
    (
        "eval-timeout",
        {"type": float, "default": "3600"},
        "evaluator: seconds to wait for a new checkpoint before giving up",
    ),
]


def _default(flag: str) -> Any:
    return next(declared.get("default") for f, declared, _ in _FLAGS if f == flag)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tfjob-trainer",
        description=(
            "Train a Keras model (MNIST built in, or your own) with TensorFlow as the task "
            "TF_CONFIG names: parameter server, worker, "
            "chief or evaluator. Every flag also reads the env var shown."
        ),
    )
    for flag, declared, text in _FLAGS:
        env = "TFJOB_" + flag.upper().replace("-", "_")
        settings = dict(declared)
        if settings.get("action") == "store_true":
            settings["default"] = os.environ.get(env, "") == "1"
            shown = f"{env}=1"
        elif settings.get("action") == "append":
            # Flags replace the environment's pairs: argparse appends to a default list.
            shown = f'{env}="k=v k2=v2"'
        else:
            # argparse converts a string default with `type`, so env values are checked too.
            settings["default"] = os.environ.get(env, declared.get("default"))
            shown = f"{env}; default %(default)s" if "default" in declared else env
        p.add_argument(f"--{flag}", help=f"{text} ({shown})".lstrip(), **settings)
    return p


def parse(argv: list[str] | None = None) -> Options:
    args = build_parser().parse_args(argv)
    for flag in (
        "steps",
        "batch_size",
        "hidden_units",
        "checkpoint_every",
        "log_every",
        "histogram_every",
        "steps_per_call",
    ):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be at least 1")
    # Parameter servers and serving workers get no checkpoint volume: "" stands for none, and
    # the roles that write checkpoints get a temporary one (`__main__.writes_checkpoints`).
    ckpt = Path(args.checkpoint_dir or "")
    model_args = plugins.parse_args(
        "model-arg", args.model_arg or plugins.split_env_args(os.environ.get("TFJOB_MODEL_ARG"))
    )
    input_args = plugins.parse_args(
        "input-arg", args.input_arg or plugins.split_env_args(os.environ.get("TFJOB_INPUT_ARG"))
    )
    if ":" not in args.model and args.model not in plugins.BUILTIN_MODELS:
        raise ValueError(
            f"--model {args.model!r}: one of {', '.join(plugins.BUILTIN_MODELS)}, or your own as "
            "package.module:function"
        )
    return Options(
        checkpoint_dir=ckpt,
        data_dir=Path(args.data_dir) if args.data_dir else None,
        dataset=args.dataset,
        model=args.model,
        hidden_units=args.hidden_units,
        steps=args.steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        strategy=args.strategy,
        sync=args.sync,
        checkpoint_every=args.checkpoint_every,
        log_every=args.log_every,
        export_dir=Path(args.export_dir) if args.export_dir else ckpt / "export",
        steps_per_call=args.steps_per_call,
        cpu_devices=args.cpu_devices,
        peer_timeout=args.peer_timeout,
        stall_timeout=args.stall_timeout,
        eval_timeout=args.eval_timeout,
        export_dir_given=bool(args.export_dir),
        histogram_every=args.histogram_every,
        model_args=model_args,
        input=args.input or None,
        input_args=input_args,
        eval_input=args.eval_input or None,
        loss=args.loss or None,
        optimizer=args.optimizer,
        metrics=tuple(m.strip() for m in (args.metrics or "").split(",") if m.strip()),
        learning_rate_given=args.learning_rate != float(_default("learning-rate")),
        metrics_file=Path(args.metrics_file) if args.metrics_file else None,
    )
