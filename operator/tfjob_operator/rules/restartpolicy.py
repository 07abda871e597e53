"""A replica's restartPolicy, one rule for both who apply it: which exits the operator retries
(`is_retryable`) and, where the API server keeps container restart rules (Kubernetes 1.35+),
which exits the kubelet restarts in place (`container_restart`). A StatefulSet's pods must say
`restartPolicy: Always`; their TensorFlow container may say otherwise for itself, so that a
task whose exit ends it is never run again."""

from __future__ import annotations

from typing import Any

from tfjob_operator.api.spec import RestartPolicy
from tfjob_protocol import stop

# The exits a signal or the kernel made (128 + signal, OOM kills): ExitCode's retried ones.
SIGNALLED = range(128, 256)


def is_retryable(policy: RestartPolicy, code: int) -> bool:
    """Whether a non-zero exit may be retried under a replica's restartPolicy. A stop on
    request always is: it is no failure, and the job resumes from what it saved."""
    if code == stop.EXIT_STOPPED:
        return True
    if policy is RestartPolicy.NEVER:
        return False
    if policy is RestartPolicy.EXIT_CODE:
        return code in SIGNALLED  # 1-127 are the program's own verdict
    return True


def _restart_on(codes: list[int]) -> list[dict[str, Any]]:
    return [{"action": "Restart", "exitCodes": {"operator": "In", "values": codes}}]


def container_restart(policy: RestartPolicy) -> dict[str, Any]:
    """The TensorFlow container's own restartPolicy and restartPolicyRules for a replica's
    restartPolicy: the kubelet restarts exactly the exits `is_retryable` retries, and never
    one that ends the task (exit 0 included: Always, as OnFailure, runs a done task once)."""
    if policy in (RestartPolicy.ALWAYS, RestartPolicy.ON_FAILURE):
        return {"restartPolicy": "OnFailure"}
    codes = sorted({stop.EXIT_STOPPED, *(SIGNALLED if policy is RestartPolicy.EXIT_CODE else ())})
    return {"restartPolicy": "Never", "restartPolicyRules": _restart_on(codes)}


PROBE_NAME = "tfjob-operator-restart-rules-probe"


def probe(namespace: str) -> dict[str, Any]:
    """A StatefulSet to create with dryRun=All: the API server keeps a container's restart
    rules only where it serves them (`keeps_rules`); nothing is stored."""
    labels = {"app": PROBE_NAME}
    container = {"name": "probe", "image": "probe", **container_restart(RestartPolicy.NEVER)}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": PROBE_NAME, "namespace": namespace},
        "spec": {
            "serviceName": PROBE_NAME,
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"restartPolicy": "Always", "containers": [container]},
            },
        },
    }


def keeps_rules(created: dict[str, Any]) -> bool:
    """Whether the dry-run `probe` came back with its container's restart rules: an API server
    that does not serve them drops the fields it does not know."""
    containers = created.get("spec", {}).get("template", {}).get("spec", {}).get("containers")
    return bool(containers and containers[0].get("restartPolicyRules"))
