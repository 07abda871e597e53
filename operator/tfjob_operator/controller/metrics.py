"""Prometheus metrics: jobs by their life (created, succeeded, ...), the operator's own work,
and leader election.

Job metrics follow Kubeflow's training-operator: counters labelled by `job_namespace` (a plain
`namespace` label would be overwritten by the scrape target's own namespace). They count
what the leader writes, so only the replica that holds the Lease reports them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tfjob_operator.rules import status as st

RECONCILES = Counter(
    "tfjob_operator_reconciles_total", "Reconciles of a TFJob, by result.", ["result"]
)
RECONCILE_SECONDS = Histogram(
    "tfjob_operator_reconcile_duration_seconds", "Time to reconcile one TFJob once."
)
TRANSITIONS = Counter(
    "tfjob_operator_job_transitions_total",
    "TFJob condition changes, by reason (TFJobSucceeded, BackoffLimitExceeded, ...).",
    ["reason"],
)
STATUS_WRITES = Counter("tfjob_operator_status_writes_total", "Status patches written.")
FIRST_PASS_SECONDS = Gauge(
    "tfjob_operator_first_pass_seconds",
    "From a start (or a take-over of the Lease) until every TFJob known then was reconciled once.",
)

JOBS_CREATED = Counter(
    "tfjob_operator_jobs_created_total", "TFJobs the operator has taken on.", ["job_namespace"]
)
JOBS_DELETED = Counter(
    "tfjob_operator_jobs_deleted_total",
    "TFJobs deleted (by a user or their TTL).",
    ["job_namespace"],
)
JOBS_SUCCESSFUL = Counter(
    "tfjob_operator_jobs_successful_total", "TFJobs that succeeded.", ["job_namespace"]
)
JOBS_FAILED = Counter(
    "tfjob_operator_jobs_failed_total",
    "TFJobs that failed, for any reason (InvalidSpec included).",
    ["job_namespace"],
)
JOBS_RESTARTED = Counter(
    "tfjob_operator_jobs_restarted_total",
    "Failure restarts of TFJob pods (what counts toward backoffLimit).",
    ["job_namespace"],
)
# Training runs from seconds (a smoke test) to days.
DURATION_BUCKETS = (10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 259200)
JOB_DURATION = Histogram(
    "tfjob_operator_job_duration_seconds",
    "From a TFJob's start to its end, by namespace and result (Succeeded or Failed).",
    ["job_namespace", "result"],
    buckets=DURATION_BUCKETS,
)
LEADER = Gauge(
    "tfjob_operator_leader", "1 while this replica holds the leader Lease and reconciles."
)
LEADER_CHANGES = Counter(
    "tfjob_operator_leader_changes_total",
    "Leader Lease changes seen by this replica: acquired or lost.",
    ["change"],
)


def record(namespace: str, before: st.Status, after: st.Status) -> None:
    """Count what a status write, from `before` to `after`, says about the job's life."""
    news = st.changes(before, after)
    if news["created"]:
        JOBS_CREATED.labels(namespace).inc()
    if news["succeeded"]:
        JOBS_SUCCESSFUL.labels(namespace).inc()
    if news["failed"]:
        JOBS_FAILED.labels(namespace).inc()
    if news["restarted"]:
        JOBS_RESTARTED.labels(namespace).inc(news["restarted"])
    if news["duration"] is not None:
        result = st.Cond.SUCCEEDED if news["succeeded"] else st.Cond.FAILED
        JOB_DURATION.labels(namespace, result).observe(news["duration"])


class JobStates(Collector):
    """`tfjob_operator_jobs{job_namespace, state}`: the jobs the operator knows, by the state
    `kubectl get tfj` shows, counted at scrape time from what the leader last wrote."""

    def __init__(self, states: Callable[[], Iterable[tuple[str, str]]]) -> None:
        self._states = states

    def collect(self) -> Iterable[Any]:
        family = GaugeMetricFamily(
            "tfjob_operator_jobs",
            "TFJobs by namespace and state (Created, Running, Restarting, Succeeded, ...).",
            labels=["job_namespace", "state"],
        )
        counts: dict[tuple[str, str], int] = {}
        for key in self._states():
            counts[key] = counts.get(key, 0) + 1
        for (namespace, state), n in sorted(counts.items()):
            family.add_metric([namespace, state or "Unknown"], n)
        yield family


def watch_states(states: Callable[[], Iterable[tuple[str, str]]]) -> None:
    REGISTRY.register(JobStates(states))


def serve(port: int) -> None:
    """Serve /metrics on all interfaces in a background thread."""
    start_http_server(port)
