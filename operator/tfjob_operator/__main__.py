"""`tfjob-operator` / `python -m tfjob_operator`: run the TFJob operator."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from .config import OperatorConfig

LOG_FORMATS = ("plain", "full", "json")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tfjob-operator",
        description=(
            "Watch TFJob objects (tfjob.dev/v1) and run them as StatefulSets and headless "
            "Services with TF_CONFIG. Connects with $KUBECONFIG, else the in-cluster "
            "service account."
        ),
    )
    p.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[],
        metavar="NS",
        help="watch this namespace (repeatable; globs like 'team-*' work); default: all",
    )
    p.add_argument(
        "--standalone",
        action="store_true",
        help="do not coordinate with other operator instances (no kopf peering)",
    )
    p.add_argument(
        "--cluster-domain",
        default=os.environ.get("TFJOB_CLUSTER_DOMAIN", "cluster.local"),
        help="DNS domain of the cluster for pod addresses in TF_CONFIG "
        "(env TFJOB_CLUSTER_DOMAIN; default: %(default)s)",
    )
    p.add_argument(
        "--liveness",
        metavar="URL",
        default=os.environ.get("TFJOB_LIVENESS"),
        help="serve liveness probes here, e.g. http://0.0.0.0:8080/healthz (env TFJOB_LIVENESS)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=int(os.environ.get("TFJOB_METRICS_PORT", "0")),
        help="serve Prometheus metrics on this port at /metrics; 0 turns them off "
        "(env TFJOB_METRICS_PORT; default %(default)s)",
    )
    p.add_argument(
        "--log-level",
        choices=("debug", "info", "warning"),
        default=os.environ.get("TFJOB_LOG_LEVEL", "info"),
        help="default: %(default)s",
    )
    p.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=os.environ.get("TFJOB_LOG_FORMAT", "full"),
        help="default: %(default)s",
    )
    return p


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    import kopf  # imported late so that --help stays fast

    from . import handlers  # noqa: F401  (registers the handlers)

    kopf.configure(
        debug=args.log_level == "debug",
        quiet=args.log_level == "warning",
        log_format=kopf.LogFormat[args.log_format.upper()],
    )
    if args.log_level != "debug":
        # kopf logs every handled watch event; keep those for debugging, our transitions for info.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        standalone=args.standalone,
        liveness_endpoint=args.liveness,
        memo=kopf.Memo(
            config=OperatorConfig(
                cluster_domain=args.cluster_domain, metrics_port=args.metrics_port
            )
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
