"""`tfjob-operator` / `python -m tfjob_operator`: run the TFJob operator."""

from __future__ import annotations

import argparse
import logging
import os

from tfjob_operator.api import rbac
from tfjob_operator.api.spec import GROUP, GROUPS
from tfjob_operator.controller.leader import Timing, default_identity, default_namespace
from tfjob_operator.controller.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from tfjob_operator.controller.settings import LeaderElection, OperatorConfig
from tfjob_operator.rules.gang import Gang, Scheduler
from tfjob_operator.rules.kueue.queue import Queueing

LOG_FORMATS = ("plain", "full", "json")


# --gang-scheduler's values besides the schedulers: found at start, or none at all.
AUTO, NONE = "auto", "none"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tfjob-operator",
        description=(
            "Watch TFJob objects (tfjob.dev/v1, or Kubeflow's kubeflow.org/v1) and run them as "
            "StatefulSets and headless Services with TF_CONFIG. Connects with $KUBECONFIG, "
            "else the in-cluster service account."
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
        "--api-group",
        choices=GROUPS,
        default=os.environ.get("TFJOB_API_GROUP", GROUP),
        help="the API group of the TFJobs served: kubeflow.org runs Kubeflow's TFJobs as "
        "written, in place of Kubeflow's training-operator (env TFJOB_API_GROUP; default: "
        "%(default)s)",
    )
    p.add_argument(
        "--standalone",
        action="store_true",
        help="no kopf peering (for several replicas, use --leader-elect)",
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
    le = p.add_argument_group(
        "leader election",
        "Several replicas, one reconciling at a time: a coordination.k8s.io/v1 Lease, with "
        "the flag names and defaults of Kubernetes' own controllers.",
    )
    le.add_argument(
        "--leader-elect",
        action="store_true",
        default=_env_flag("TFJOB_LEADER_ELECT"),
        help="take the Lease before reconciling; stand by while another replica holds it "
        "(env TFJOB_LEADER_ELECT=true)",
    )
    le.add_argument(
        "--leader-elect-resource-name",
        default=rbac.LEASE_NAME,
        help="name of the Lease (default: %(default)s)",
    )
    le.add_argument(
        "--leader-elect-resource-namespace",
        default=None,
        help="namespace of the Lease (default: env POD_NAMESPACE, else the service account's "
        "namespace, else 'default')",
    )
    for flag, default, what in (
        ("lease-duration", Timing.lease_duration, "how long a Lease lasts unrenewed"),
        ("renew-deadline", Timing.renew_deadline, "the leader stops writing if not renewed in"),
        ("retry-period", Timing.retry_period, "time between tries to take or renew the Lease"),
    ):
        le.add_argument(
            f"--leader-elect-{flag}",
            type=float,
            default=default,
            metavar="SECONDS",
            help=f"{what} (default: %(default)ss)",
        )
    p.add_argument(
        "--gang-scheduler",
        choices=[AUTO, NONE, *(s.value for s in Scheduler)],
        default=os.environ.get("TFJOB_GANG_SCHEDULER") or AUTO,
        help="start each job's pods together, or none of them, with this gang scheduler: "
        "kubernetes (its own, scheduling.k8s.io/v1beta1, 1.37+), volcano or "
        "scheduler-plugins; a PodGroup per job from runPolicy.schedulingPolicy. auto: "
        "kubernetes where the API server serves it, else none (the default scheduler "
        "places pods one by one) (env TFJOB_GANG_SCHEDULER; default: %(default)s)",
    )
    p.add_argument(
        "--gang-scheduler-name",
        default=os.environ.get("TFJOB_GANG_SCHEDULER_NAME", ""),
        metavar="NAME",
        help="the pods' schedulerName (default: volcano, or scheduler-plugins-scheduler; "
        "with kubernetes, the pod's own)",
    )
    kq = p.add_argument_group(
        "Kueue",
        "TFJobs labelled kueue.x-k8s.io/queue-name wait for Kueue's admission: a Workload per "
        "job, pods only once it is admitted, placed on the admitted flavors. For kubeflow.org "
        "TFJobs, only once Kueue's own kubeflow.org/tfjob integration is off (its default from "
        "v0.19): while it is on, leave --kueue off and Kueue queues them through "
        "runPolicy.suspend.",
    )
    kq.add_argument(
        "--kueue",
        action="store_true",
        default=_env_flag("TFJOB_KUEUE"),
        help="queue labelled TFJobs through Kueue (env TFJOB_KUEUE=true)",
    )
    kq.add_argument(
        "--kueue-manage-all",
        action="store_true",
        default=_env_flag("TFJOB_KUEUE_MANAGE_ALL"),
        help="with --kueue, queue every TFJob; one without the label waits in the LocalQueue "
        "'default' of its namespace (env TFJOB_KUEUE_MANAGE_ALL=true)",
    )
    api = p.add_argument_group(
        "API server load",
        "Client-side rate limits of the operator's own API requests, with the flag names and "
        "defaults of kube-controller-manager; a 429 is retried after its Retry-After.",
    )
    api.add_argument(
        "--kube-api-qps",
        type=float,
        default=float(os.environ.get("TFJOB_KUBE_API_QPS", DEFAULT_QPS)),
        metavar="QPS",
        help="sustained requests per second; 0 turns the limit off "
        "(env TFJOB_KUBE_API_QPS; default: %(default)s)",
    )
    api.add_argument(
        "--kube-api-burst",
        type=int,
        default=int(os.environ.get("TFJOB_KUBE_API_BURST", DEFAULT_BURST)),
        metavar="N",
        help="requests allowed at once above the QPS (env TFJOB_KUBE_API_BURST; "
        "default: %(default)s)",
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


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


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
