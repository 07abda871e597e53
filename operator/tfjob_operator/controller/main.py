"""`tfjob-operator` / `python -m tfjob_operator`: run the TFJob operator."""

from __future__ import annotations

import argparse
import logging

from tfjob_operator.api.spec import GROUPS
from tfjob_operator.controller.flags import AUTO, FLAGS, NONE, SECTIONS
from tfjob_operator.controller.leader import Timing, default_identity, default_namespace
from tfjob_operator.controller.settings import LeaderElection, OperatorConfig
from tfjob_operator.rules.gang import Gang, Scheduler
from tfjob_operator.rules.kueue.queue import Queueing


def build_parser() -> argparse.ArgumentParser:
    """The parser of the table's flags; the environment's defaults are read now."""
    parser = argparse.ArgumentParser(
        prog="tfjob-operator",
        description=(
            "Watch TFJob objects (tfjob.dev/v1, or Kubeflow's kubeflow.org/v1) and run them as "
            "StatefulSets and headless Services with TF_CONFIG. Connects with $KUBECONFIG, "
            "else the in-cluster service account."
        ),
    )
    groups = {
        section: parser.add_argument_group(section.title, section.description)
        for section in SECTIONS
    }
    for flag in FLAGS:
        flag.add_to(parser if flag.section is None else groups[flag.section])
    return parser


def config_from(args: argparse.Namespace) -> OperatorConfig:
    """The operator's own settings from its flags."""
    election = None
    if args.leader_elect:
        election = LeaderElection(
            namespace=args.leader_elect_resource_namespace or default_namespace(),
            name=args.leader_elect_resource_name,
            identity=default_identity(),
            timing=Timing(
                args.leader_elect_lease_duration,
                args.leader_elect_renew_deadline,
                args.leader_elect_retry_period,
            ),
        )
    gang = (
        Gang(Scheduler(args.gang_scheduler), args.gang_scheduler_name)
        if args.gang_scheduler not in (AUTO, NONE, "")
        else None
    )
    return OperatorConfig(
        cluster_domain=args.cluster_domain,
        metrics_port=args.metrics_port,
        gang=gang,
        gang_auto=args.gang_scheduler == AUTO,
        leader_election=election,
        namespaces=tuple(args.namespace),
        api_qps=args.kube_api_qps,
        api_burst=args.kube_api_burst,
        api_group=args.api_group,
        queueing=Queueing(args.kueue_manage_all) if args.kueue else None,
    )


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    config = config_from(args)
    if config.leader_election is not None:
        for problem in config.leader_election.timing.problems():
            parser.error(problem)
    if config.api_burst < 1:
        parser.error("--kube-api-burst must be at least 1")
    if config.api_group not in GROUPS:  # argparse checks a flag's value, not its env default
        parser.error(f"--api-group (or TFJOB_API_GROUP) must be one of {', '.join(GROUPS)}")
    if args.kueue_manage_all and not args.kueue:
        parser.error("--kueue-manage-all needs --kueue")
    import kopf  # imported late so that --help stays fast

    from tfjob_operator.controller import handlers

    handlers.register(config.api_group, kueue=config.queueing is not None)

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
        memo=kopf.Memo(config=config),
    )
