"""Operator settings that are ours, not kopf's."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OperatorConfig:
    cluster_domain: str = "cluster.local"
    metrics_port: int = 0  # 0: no metrics endpoint
