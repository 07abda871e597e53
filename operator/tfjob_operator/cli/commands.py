"""`tfjob`: the TFJob command line. `tfjob run FILE.yaml` runs a TFJob on this machine."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from pathlib import Path

import yaml

from tfjob_operator.api.spec import API_VERSION, GROUP, GROUPS, KIND


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tfjob",
        description="Work with TFJobs: run one on this machine, or on a cluster through "
        "$KUBECONFIG (submit, logs, get, scale, tensorboard, delete).",
    )
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
    _cluster_commands(sub)
    return p


def _cluster_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands that work on a cluster, with kubectl's connection flags."""
    where = argparse.ArgumentParser(add_help=False)
    where.add_argument("-n", "--namespace", help="default: the kubeconfig context's, else default")
    where.add_argument("--context", help="the kubeconfig context (default: the current one)")
    where.add_argument(
        "--api-group",
        choices=GROUPS,
        default=os.environ.get("TFJOB_API_GROUP", GROUP),
        help="the TFJobs' API group, as the operator serves it (env TFJOB_API_GROUP; default: "
        "%(default)s; submit goes by the manifest's apiVersion)",
    )
    submit = sub.add_parser(
        "submit",
        parents=[where],
        help="create a TFJob on the cluster (checked first with the operator's own rules)",
    )
    submit.add_argument("file", type=Path, help="a TFJob manifest (YAML)")
    submit.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="stream every replica's log until the job ends, print its summary, and exit "
        "with its result (0: Succeeded, 1: Failed)",
    )
    logs = sub.add_parser("logs", parents=[where], help="the logs of a job's replicas")
    logs.add_argument("name")
    logs.add_argument("--replica", help="one replica, e.g. worker-1 (default: all)")
    logs.add_argument("-f", "--follow", action="store_true", help="stream until they end")
    get = sub.add_parser("get", parents=[where], help="a table of TFJobs")
    get.add_argument("name", nargs="?")
    get.add_argument("-A", "--all-namespaces", action="store_true")
    board = sub.add_parser(
        "tensorboard", parents=[where], help="reach a job's TensorBoard on a local port"
    )
    board.add_argument("name")
    board.add_argument("--port", type=int, default=6006, help="local port (0: any free one)")
    scale = sub.add_parser(
        "scale",
        parents=[where],
        help="change a job's Worker (and PS) replicas; its tasks restart with the new cluster",
    )
    scale.add_argument("name")
    scale.add_argument("--workers", type=_count, required=True, help="Worker replicas")
    scale.add_argument("--ps", type=_count, help="PS replicas (default: as they are)")
    delete = sub.add_parser("delete", parents=[where], help="delete a TFJob and all it owns")
    delete.add_argument("name")


def _count(text: str) -> int:
    """A replica count: a whole number, 0 or more."""
    try:
        count = int(text)
    except ValueError:
        count = -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a replica count (0, 1, 2, ...)")
    return count


def run_cluster_command(args: argparse.Namespace) -> int:
    # Imported here: `tfjob run` needs no Kubernetes client.
    from tfjob_operator.cli.connection import CliError, Connection
    from tfjob_operator.cli.delete import delete
    from tfjob_operator.cli.get import get
    from tfjob_operator.cli.logs import logs
    from tfjob_operator.cli.scale import scale
    from tfjob_operator.cli.submit import submit
    from tfjob_operator.cli.tensorboard_forward import tensorboard

    try:
        cluster = Connection.connect(args.namespace, args.context, args.api_group)
        out = sys.stdout
        if args.command == "submit":
            return submit(cluster, args.file, args.follow, out)
        if args.command == "logs":
            return logs(cluster, args.name, args.replica, args.follow, out)
        if args.command == "get":
            return get(cluster, args.name, args.all_namespaces, out)
        if args.command == "tensorboard":
            return tensorboard(cluster, args.name, args.port, out)
        if args.command == "scale":
            return scale(cluster, args.name, args.workers, args.ps, out)
        return delete(cluster, args.name, out)
    except CliError as e:
        print(f"tfjob: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "api_group", GROUP) not in GROUPS:  # from TFJOB_API_GROUP, unchecked
        parser.error(f"TFJOB_API_GROUP must be one of {', '.join(GROUPS)}")
    if args.command != "run":
        return run_cluster_command(args)
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
    from tfjob_operator.cli.localrun import LocalRunner

    workdir = args.workdir or Path("tfjob-runs") / str(meta.get("name", "job"))
    entry = shlex.split(args.entrypoint) if args.entrypoint else None
    runner = LocalRunner(body, workdir, entrypoint=entry, verbose=args.verbose)
    # Ctrl-C and SIGTERM stop the job as a cluster stops its pods (`Runner.stop`), even where
    # the shell that started us ignores SIGINT (a background job of a non-interactive shell):
    # Python keeps an inherited SIG_IGN otherwise.
    signal.signal(signal.SIGTERM, runner.interrupt)
    signal.signal(signal.SIGINT, runner.interrupt)
    return runner.run()
