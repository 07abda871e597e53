"""The operator's flags as a table: each flag's names, type, default, environment variable and
help in one entry, and the argument groups of --help they belong to.

One entry per flag, so that a flag reads as one set of settings and the environment variable the
chart or the image may set is named beside it."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfjob_operator.api import rbac
from tfjob_operator.api.spec import GROUP, GROUPS
from tfjob_operator.controller.leader import Timing
from tfjob_operator.controller.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from tfjob_operator.rules.gang import Scheduler

LOG_FORMATS = ("plain", "full", "json")

# --gang-scheduler's values besides the schedulers: found at start, or none at all.
AUTO, NONE = "auto", "none"


@dataclass(frozen=True)
class Section:
    """An argument group of --help: flags that share a subject, introduced once."""

    title: str
    description: str


LEADER_ELECTION = Section(
    "leader election",
    "Several replicas, one reconciling at a time: a coordination.k8s.io/v1 Lease, with "
    "the flag names and defaults of Kubernetes' own controllers.",
)
KUEUE = Section(
    "Kueue",
    "TFJobs labelled kueue.x-k8s.io/queue-name wait for Kueue's admission: a Workload per "
    "job, pods only once it is admitted, placed on the admitted flavors. For kubeflow.org "
    "TFJobs, only once Kueue's own kubeflow.org/tfjob integration is off (its default from "
    "v0.19): while it is on, leave --kueue off and Kueue queues them through "
    "runPolicy.suspend.",
)
API_LOAD = Section(
    "API server load",
    "Client-side rate limits of the operator's own API requests, with the flag names and "
    "defaults of kube-controller-manager; a 429 is retried after its Retry-After.",
)
# In the order --help prints them.
SECTIONS = (LEADER_ELECTION, KUEUE, API_LOAD)


@dataclass(frozen=True)
class Flag:
    """One flag as `add_argument` takes it, plus the environment variable that sets its
    default: the chart and the image pass some settings that way."""

    names: tuple[str, ...]
    help: str
    default: object = None
    env: str | None = None
    # An empty variable counts as unset (else it is the value, as it was given).
    blank_env_is_unset: bool = False
    type: Callable[[str], object] | None = None
    action: str | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    section: Section | None = None

    def default_now(self) -> object:
        """The default as the environment has it when the parser is built."""
        if self.action == "append":
            return []  # a list per parser: it is the value itself when the flag is not given
        if self.env is None:
            return self.default
        if self.action == "store_true":
            return env_flag(self.env)
        value = os.environ.get(self.env)
        if value is None or (self.blank_env_is_unset and not value):
            return self.default
        return value if self.type is None else self.type(value)

    def add_to(self, container: argparse._ActionsContainer) -> None:
        """Only what the entry sets is passed, so argparse's own defaults hold for the rest
        (a store_true flag without a default is False, not None)."""
        given: dict[str, Any] = {
            "action": self.action,
            "type": self.type,
            "choices": self.choices,
            "default": self.default_now(),
            "metavar": self.metavar,
            "help": self.help,
        }
        container.add_argument(
            *self.names, **{key: value for key, value in given.items() if value is not None}
        )


def env_flag(name: str) -> bool:
    """A boolean setting from the environment, as the chart writes it."""
    return os.environ.get(name, "").lower() in ("1", "true", "yes")


# In the order they are added: the order of --help within each group, and of the parsed names.
FLAGS = (
    Flag(
        ("-n", "--namespace"),
        "watch this namespace (repeatable; globs like 'team-*' work); default: all",
        action="append",
        metavar="NS",
    ),
    Flag(
        ("--api-group",),
        "the API group of the TFJobs served: kubeflow.org runs Kubeflow's TFJobs as "
        "written, in place of Kubeflow's training-operator (env TFJOB_API_GROUP; default: "
        "%(default)s)",
        default=GROUP,
        env="TFJOB_API_GROUP",
        choices=GROUPS,
    ),
    Flag(
        ("--standalone",),
        "no kopf peering (for several replicas, use --leader-elect)",
        action="store_true",
    ),
    Flag(
        ("--cluster-domain",),
        "DNS domain of the cluster for pod addresses in TF_CONFIG "
        "(env TFJOB_CLUSTER_DOMAIN; default: %(default)s)",
        default="cluster.local",
        env="TFJOB_CLUSTER_DOMAIN",
    ),
    Flag(
        ("--liveness",),
        "serve liveness probes here, e.g. http://0.0.0.0:8080/healthz (env TFJOB_LIVENESS)",
        env="TFJOB_LIVENESS",
        metavar="URL",
    ),
    Flag(
        ("--metrics-port",),
        "serve Prometheus metrics on this port at /metrics; 0 turns them off "
        "(env TFJOB_METRICS_PORT; default %(default)s)",
        default=0,
        env="TFJOB_METRICS_PORT",
        type=int,
    ),
    Flag(
        ("--leader-elect",),
        "take the Lease before reconciling; stand by while another replica holds it "
        "(env TFJOB_LEADER_ELECT=true)",
        env="TFJOB_LEADER_ELECT",
        action="store_true",
        section=LEADER_ELECTION,
    ),
    Flag(
        ("--leader-elect-resource-name",),
        "name of the Lease (default: %(default)s)",
        default=rbac.LEASE_NAME,
        section=LEADER_ELECTION,
    ),
    Flag(
        ("--leader-elect-resource-namespace",),
        "namespace of the Lease (default: env POD_NAMESPACE, else the service account's "
        "namespace, else 'default')",
        section=LEADER_ELECTION,
    ),
    Flag(
        ("--leader-elect-lease-duration",),
        "how long a Lease lasts unrenewed (default: %(default)ss)",
        default=Timing.lease_duration,
        type=float,
        metavar="SECONDS",
        section=LEADER_ELECTION,
    ),
    Flag(
        ("--leader-elect-renew-deadline",),
        "the leader stops writing if not renewed in (default: %(default)ss)",
        default=Timing.renew_deadline,
        type=float,
        metavar="SECONDS",
        section=LEADER_ELECTION,
    ),
    Flag(
        ("--leader-elect-retry-period",),
        "time between tries to take or renew the Lease (default: %(default)ss)",
        default=Timing.retry_period,
        type=float,
        metavar="SECONDS",
        section=LEADER_ELECTION,
    ),
    Flag(
        ("--gang-scheduler",),
        "start each job's pods together, or none of them, with this gang scheduler: "
        "kubernetes (its own, scheduling.k8s.io/v1beta1, 1.37+), volcano or "
        "scheduler-plugins; a PodGroup per job from runPolicy.schedulingPolicy. auto: "
        "kubernetes where the API server serves it, else none (the default scheduler "
        "places pods one by one) (env TFJOB_GANG_SCHEDULER; default: %(default)s)",
        default=AUTO,
        env="TFJOB_GANG_SCHEDULER",
        blank_env_is_unset=True,
        choices=(AUTO, NONE, *(s.value for s in Scheduler)),
    ),
    Flag(
        ("--gang-scheduler-name",),
        "the pods' schedulerName (default: volcano, or scheduler-plugins-scheduler; "
        "with kubernetes, the pod's own)",
        default="",
        env="TFJOB_GANG_SCHEDULER_NAME",
        metavar="NAME",
    ),
    Flag(
        ("--kueue",),
        "queue labelled TFJobs through Kueue (env TFJOB_KUEUE=true)",
        env="TFJOB_KUEUE",
        action="store_true",
        section=KUEUE,
    ),
    Flag(
        ("--kueue-manage-all",),
        "with --kueue, queue every TFJob; one without the label waits in the LocalQueue "
        "'default' of its namespace (env TFJOB_KUEUE_MANAGE_ALL=true)",
        env="TFJOB_KUEUE_MANAGE_ALL",
        action="store_true",
        section=KUEUE,
    ),
    Flag(
        ("--kube-api-qps",),
        "sustained requests per second; 0 turns the limit off "
        "(env TFJOB_KUBE_API_QPS; default: %(default)s)",
        default=DEFAULT_QPS,
        env="TFJOB_KUBE_API_QPS",
        type=float,
        metavar="QPS",
        section=API_LOAD,
    ),
    Flag(
        ("--kube-api-burst",),
        "requests allowed at once above the QPS (env TFJOB_KUBE_API_BURST; default: %(default)s)",
        default=DEFAULT_BURST,
        env="TFJOB_KUBE_API_BURST",
        type=int,
        metavar="N",
        section=API_LOAD,
    ),
    Flag(
        ("--log-level",),
        "default: %(default)s",
        default="info",
        env="TFJOB_LOG_LEVEL",
        choices=("debug", "info", "warning"),
    ),
    Flag(
        ("--log-format",),
        "default: %(default)s",
        default="full",
        env="TFJOB_LOG_FORMAT",
        choices=LOG_FORMATS,
    ),
)
