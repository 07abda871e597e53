"""Operator settings that are ours, not kopf's."""

from __future__ import annotations

from dataclasses import dataclass, field

from tfjob_operator.api.spec import GROUP
from tfjob_operator.controller.leader import Timing
from tfjob_operator.controller.ratelimit import DEFAULT_BURST, DEFAULT_QPS
from tfjob_operator.rules.gang import Gang
from tfjob_operator.rules.kueue.queue import Queueing


@dataclass(frozen=True)
class LeaderElection:
    """Where the Lease lives and its timing; `identity` names this replica in it."""

    namespace: str
    name: str
    identity: str
    timing: Timing = field(default_factory=Timing)


@dataclass(frozen=True)
class OperatorConfig:
    cluster_domain: str = "cluster.local"
    metrics_port: int = 0  # 0: no metrics endpoint
    gang: Gang | None = None  # None: the default scheduler, pod by pod
    gang_auto: bool = False  # gang found at start: Kubernetes' own where served, else None
    leader_election: LeaderElection | None = None  # None: this replica always reconciles
    namespaces: tuple[str, ...] = ()  # (): every namespace
    api_qps: float = DEFAULT_QPS  # the client's sustained requests a second; <= 0: no limit
    api_burst: int = DEFAULT_BURST  # requests let through at once before qps applies
    api_group: str = GROUP  # the TFJobs served: tfjob.dev, or Kubeflow's kubeflow.org
    queueing: Queueing | None = None  # None: Kueue's queue label is not read (--kueue)

    @property
    def exact_namespaces(self) -> bool:
        """Watching named namespaces only (no glob, no negation): nothing cluster-wide is
        needed, not even the list of namespaces."""
        return bool(self.namespaces) and not any(c in ns for ns in self.namespaces for c in "*?[!")
