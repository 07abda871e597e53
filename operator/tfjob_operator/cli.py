"""`tfjob`: the TFJob command line. `tfjob run FILE.yaml` runs a TFJob on this machine."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from pathlib import Path
from typing import NoReturn

import yaml

from .api import API_VERSION, KIND


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tfjob", description="Work with TFJobs.")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="run a TFJob here, one process per replica, with no cluster",
        description=(
            "Run a TFJob manifest on this machine: one process per replica and index, with the "
            "TF_CONFIG and lifecycle rules the operator would apply. Container images are not "
            "run: each container's command (default: python -m tfjob_trainer) and args run in "
            "the current environment."
        ),
    )
    run.add_argument("file", type=Path, help="a TFJob manifest (YAML)")
    run.add_argument(
        "--workdir", type=Path, help="checkpoints and logs go here (default: ./tfjob-runs/<job>)"
    )
    run.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also show TensorFlow's C++ start-up logging (oneDNN, CPU features, ...)",
    )
    run.add_argument(
        "--entrypoint",
        default=None,
        help="command for containers that name none (default: "
        "'python -m tfjob_trainer', as in the trainer image)",
    )
    return p


def _stop(signum: int, _frame: object) -> NoReturn:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        body = yaml.safe_load(args.file.read_text())
    except (OSError, yaml.YAMLError) as e:
        print(f"tfjob: cannot read {args.file}: {e}", file=sys.stderr)
        return 2
    if not isinstance(body, dict) or body.get("kind") != KIND:
        print(f"tfjob: {args.file} is not a {KIND} ({API_VERSION})", file=sys.stderr)
        return 2
    meta = body.setdefault("metadata", {})
    meta.setdefault("namespace", "local")
    meta.setdefault("uid", "local")
    from .localrun import Runner

    workdir = args.workdir or Path("tfjob-runs") / str(meta.get("name", "job"))
    entry = shlex.split(args.entrypoint) if args.entrypoint else None
    runner = Runner(body, workdir, entrypoint=entry, verbose=args.verbose)
    signal.signal(signal.SIGTERM, _stop)  # stop the children cleanly, as on Ctrl-C
    # Ctrl-C stops the job even where the shell that started us ignores SIGINT (a background
    # job of a non-interactive shell): Python keeps an inherited SIG_IGN otherwise.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return runner.run()
    except KeyboardInterrupt:
        runner.say("[tfjob] interrupted; every process stopped")
        return 130


if __name__ == "__main__":
    sys.exit(main())
