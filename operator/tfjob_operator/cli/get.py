"""`tfjob get`: a table of TFJobs, one job, a namespace's or every namespace's, with kubectl's
columns and AGE."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, TextIO

from tfjob_operator.api.spec import PLURAL, VERSION
from tfjob_operator.cli.connection import Connection
from tfjob_operator.rules import status as st


def get(cluster: Connection, name: str | None, all_namespaces: bool, out: TextIO) -> int:
    if name:
        jobs = [cluster.job(name)]
    elif all_namespaces:
        jobs = cluster.call(
            f"list {PLURAL}",
            cluster.custom.list_cluster_custom_object,
            cluster.group,
            VERSION,
            PLURAL,
        )["items"]
    else:
        jobs = cluster.call(
            f"list {PLURAL}",
            cluster.custom.list_namespaced_custom_object,
            cluster.group,
            VERSION,
            cluster.namespace,
            PLURAL,
        )["items"]
    if not jobs:
        where = "any namespace" if all_namespaces else f"namespace {cluster.namespace}"
        print(f"No TFJobs in {where}.", file=out)
        return 0
    header = ["NAME", "STATE", "REPLICAS", "RESTARTS", "AGE"]
    rows = [["NAMESPACE", *header] if all_namespaces else header]
    rows += [job_row(j, all_namespaces) for j in sorted(jobs, key=_ns_name)]
    print(table(rows), file=out)
    return 0


def _ns_name(job: dict[str, Any]) -> tuple[str, str]:
    return job["metadata"]["namespace"], job["metadata"]["name"]


def age(created: Any) -> str:
    """kubectl's AGE: 45s, 12m, 3h, 2d."""
    if isinstance(created, str):
        created = st.parse_timestamp(created)
    if created is None:
        return "-"
    seconds = max(0, int((datetime.now(UTC) - created).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def job_row(job: dict[str, Any], namespace: bool) -> list[str]:
    status = job.get("status") or {}
    replicas = sum(
        int(rs.get("replicas", 1))
        for rs in ((job.get("spec") or {}).get("tfReplicaSpecs") or {}).values()
        if isinstance(rs, dict)
    )
    meta = job["metadata"]
    row = [
        meta["name"],
        st.state(status) or "-",
        status.get("activeReplicas") or f"0/{replicas}",
        str(status.get("restarts", 0)),
        age(meta.get("creationTimestamp")),
    ]
    return [meta["namespace"], *row] if namespace else row
