"""Prometheus metrics: how often and how long the operator reconciles, and what jobs do."""

from __future__ import annotations

from prometheus_client import Counter, Histogram, start_http_server

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


def serve(port: int) -> None:
    """Serve /metrics on all interfaces in a background thread."""
    start_http_server(port)
