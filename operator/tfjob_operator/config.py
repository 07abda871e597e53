"""Operator settings that are ours, not kopf's."""

from __future__ import annotations

from dataclasses import dataclass, field

from .gang import Gang
from .leader import Timing


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
    leader_election: LeaderElection | None = None  # None: this replica always reconciles
