"""Kueue's part in the tests: its own CRDs, unchanged from the Go module of the Kueue release
in `testbed/go/kueue`, and the Workload status writes of its scheduler and Workload
controller."""

from __future__ import annotations

from typing import Any

from tfjob_testbed.gobuild import KUEUE, module_source

CRD_NAMES = ("workloads.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io")
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
NOW = "2026-01-01T00:00:00Z"


def crd_documents() -> str:
    """Kueue's Workload and ResourceFlavor CRDs as its release ships them, for `kubectl
    create -f -` (not apply: the Workload CRD is too large for kubectl's last-applied
    annotation)."""
    bases = module_source(KUEUE, "config/components/crd/bases")
    files = [bases / f"{name.split('.', 1)[1]}_{name.split('.', 1)[0]}.yaml" for name in CRD_NAMES]
    return "\n---\n".join(f.read_text() for f in files)


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
