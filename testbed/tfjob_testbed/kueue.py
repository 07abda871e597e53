"""Kueue's part in the tests: its own CRDs, installed on the test bed's Kubernetes 1.20, and
the Workload status writes of its scheduler and Workload controller."""

from __future__ import annotations

import json
from typing import Any

import yaml

from tfjob_testbed.paths import ROOT

CRDS = ROOT / "tests" / "data" / "kueue" / "crds.yaml"
CRD_NAMES = ("workloads.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io")
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
NOW = "2026-01-01T00:00:00Z"


def _for_1_20(node: Any) -> Any:
    """What Kubernetes 1.20 refuses, left out: CEL rules and selectableFields (1.25+), and
    empty-string defaults (1.20 reads them as null); a list-map key that lost its default is
    required instead."""
    if isinstance(node, dict):
        node = {
            k: _for_1_20(v)
            for k, v in node.items()
            if k not in ("x-kubernetes-validations", "selectableFields")
            and not (k == "default" and v == "")
        }
        keys = node.get("x-kubernetes-list-map-keys")
        if keys and isinstance(node.get("items"), dict):
            items = node["items"]
            items["required"] = sorted(set(items.get("required") or []) | set(keys))
        return node
    if isinstance(node, list):
        return [_for_1_20(v) for v in node]
    return node


def crd_documents() -> str:
    """Kueue's Workload and ResourceFlavor CRDs as the test bed takes them, for `kubectl
    create -f -` (not apply: the Workload CRD is too large for kubectl's last-applied
    annotation)."""
    docs = [_for_1_20(d) for d in yaml.safe_load_all(CRDS.read_text()) if d]
    return "\n---\n".join(json.dumps(d) for d in docs)


def flavor(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": spec,
    }


def cond(type_: str, status: bool, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message or reason,
        "lastTransitionTime": NOW,
    }


def condition(workload: dict[str, Any], type_: str) -> dict[str, Any]:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


def status_write(current: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """Kueue's write of a Workload's status, as a merge patch on `current`: conditions set by
    type (the rest of the list kept), other fields as given."""
    conditions = {c["type"]: c for c in (current.get("status") or {}).get("conditions") or []}
    for c in status.get("conditions", []):
        conditions[c["type"]] = c
    rest = {k: v for k, v in status.items() if k != "conditions"}
    return {"status": {**rest, "conditions": list(conditions.values())}}


def admission(
    workload: dict[str, Any], flavor_name: str, updates: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """What Kueue's scheduler writes when it admits `workload` on one flavor; `updates`, the
    pod set updates of an admission check that is Ready."""
    checks = (
        {"admissionChecks": [{"name": "provisioning", "state": "Ready", "message": "Provisioned",
                              "lastTransitionTime": NOW, "podSetUpdates": updates}]}
        if updates is not None
        else {}
    )  # fmt: skip
    return {
        **checks,
        "admission": {
            "clusterQueue": "cluster-a",
            "podSetAssignments": [
                {
                    "name": p["name"],
                    "flavors": {"cpu": flavor_name, "memory": flavor_name},
                    "count": p["count"],
                }
                for p in workload["spec"]["podSets"]
            ],
        },
        "conditions": [
            cond(
                "QuotaReserved", True, "QuotaReserved", "Quota reserved in ClusterQueue cluster-a"
            ),
            cond("Admitted", True, "Admitted", "The workload is admitted"),
            cond("Evicted", False, "QuotaReserved", "Previously: preempted"),
        ],
    }


# What Kueue's scheduler writes when it preempts a Workload for a higher-priority one.
PREEMPTION = {
    "conditions": [
        cond("Evicted", True, "Preempted", "Preempted to accommodate a higher priority Workload"),
        cond(
            "Preempted",
            True,
            "InClusterQueue",
            "Preempted to accommodate a higher priority Workload",
        ),
    ]
}
