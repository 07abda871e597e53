"""Command-line flags, each with an environment fallback so a pod template can use either."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

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
    steps_per_call: int
    cpu_devices: int
    peer_timeout: float
    eval_timeout: float

    @property
    def log_dir(self) -> Path:
        return self.checkpoint_dir / "logs"


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"TFJOB_{name}", default)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tfjob-trainer",
        description=(
            "Train MNIST with TensorFlow as the task TF_CONFIG names: parameter server, worker, "
            "chief or evaluator. Every flag also reads the env var shown."
        ),
    )
    p.add_argument(
        "--checkpoint-dir",
        default=_env("CHECKPOINT_DIR"),
        help="checkpoints, TensorBoard logs and the export (TFJOB_CHECKPOINT_DIR)",
    )
    p.add_argument(
        "--data-dir",
        default=_env("DATA_DIR"),
        help="where MNIST may be (IDX files or mnist.npz), and the data cache (TFJOB_DATA_DIR)",
    )
    p.add_argument(
        "--dataset",
        choices=("mnist", "digits", "synthetic"),
        default=_env("DATASET", "mnist"),
        help="(TFJOB_DATASET; default %(default)s)",
    )
    p.add_argument(
        "--model",
        choices=("mlp", "cnn"),
        default=_env("MODEL", "mlp"),
        help="mlp is 784-500-10 (TFJOB_MODEL; default %(default)s)",
    )
    p.add_argument(
        "--hidden-units",
        type=int,
        default=int(_env("HIDDEN_UNITS", "500")),
        help="width of the mlp's hidden layer (TFJOB_HIDDEN_UNITS; default %(default)s)",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=int(_env("STEPS", "1000")),
        help="global steps to train (TFJOB_STEPS; default %(default)s)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=int(_env("BATCH_SIZE", "100")),
        help="examples per replica per step (TFJOB_BATCH_SIZE; default %(default)s)",
    )
    p.add_argument(
        "--learning-rate",
        type=float,
        default=float(_env("LEARNING_RATE", "0.001")),
        help="(TFJOB_LEARNING_RATE; default %(default)s)",
    )
    p.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default=_env("STRATEGY", "auto"),
        help="(TFJOB_STRATEGY; default %(default)s)",
    )
    p.add_argument(
        "--sync",
        action="store_true",
        default=_env("SYNC", "") == "1",
        help="between-graph only: aggregate gradients with SyncReplicasOptimizer (TFJOB_SYNC=1)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=int,
        default=int(_env("CHECKPOINT_EVERY", "500")),
        help="steps between checkpoints (TFJOB_CHECKPOINT_EVERY; default %(default)s)",
    )
    p.add_argument(
        "--log-every",
        type=int,
        default=int(_env("LOG_EVERY", "100")),
        help="steps between log lines and summaries (TFJOB_LOG_EVERY; default %(default)s)",
    )
    p.add_argument(
        "--export-dir",
        default=_env("EXPORT_DIR"),
        help="where the chief exports the model (TFJOB_EXPORT_DIR; default "
        "<checkpoint-dir>/export)",
    )
    p.add_argument(
        "--steps-per-call",
        type=int,
        default=int(_env("STEPS_PER_CALL", "10")),
        help="steps run inside one tf.function call or scheduled closure "
        "(TFJOB_STEPS_PER_CALL; default %(default)s)",
    )
    p.add_argument(
        "--cpu-devices",
        type=int,
        default=int(_env("CPU_DEVICES", "0")),
        help="mirrored only: split the CPU into this many logical devices, to try "
        "multi-device training without GPUs (TFJOB_CPU_DEVICES)",
    )
    p.add_argument(
        "--peer-timeout",
        type=float,
        default=float(_env("PEER_TIMEOUT", "600")),
        help="seconds to wait for every peer to resolve and answer "
        "(TFJOB_PEER_TIMEOUT; default %(default)s)",
    )
    p.add_argument(
        "--eval-timeout",
        type=float,
        default=float(_env("EVAL_TIMEOUT", "3600")),
        help="evaluator: seconds to wait for a new checkpoint before giving up "
        "(TFJOB_EVAL_TIMEOUT; default %(default)s)",
    )
    return p


def parse(argv: list[str] | None = None) -> Options:
    args = build_parser().parse_args(argv)
    if not args.checkpoint_dir:
        raise ValueError("--checkpoint-dir (or TFJOB_CHECKPOINT_DIR) is required")
    for flag in (
        "steps",
        "batch_size",
        "hidden_units",
        "checkpoint_every",
        "log_every",
        "steps_per_call",
    ):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be at least 1")
    ckpt = Path(args.checkpoint_dir)
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
        eval_timeout=args.eval_timeout,
    )
