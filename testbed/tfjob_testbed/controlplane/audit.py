"""The API server's audit policies: what the bed's control plane records of each request."""

from __future__ import annotations

from typing import Any

# The API server's audit log keeps every write to what the operator writes, every read of
# Events, and every list and watch (with its selectors), with the client's user agent:
# evidence of which operator replica wrote what, and when, of how many requests a job costs,
# and of what each watch asks for.
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": ["create", "update", "patch", "delete"],
            "resources": [
                {"group": "tfjob.dev"},
                {"group": "kubeflow.org"},
                {"group": "apps", "resources": ["statefulsets"]},
                # Pods themselves, not their status (which the tests' stand-in kubelet writes):
                # the operator's patches of a pod's own Kubeflow labels.
                {"group": "", "resources": ["pods"]},
                {"group": "", "resources": ["services", "persistentvolumeclaims", "events"]},
                {"group": "scheduling.volcano.sh"},
                {"group": "scheduling.x-k8s.io"},
                {"group": "scheduling.k8s.io", "resources": ["podgroups", "workloads"]},
            ],
        },
        {"level": "Metadata", "verbs": ["get", "list"], "resources": [{"resources": ["events"]}]},
        # Every list and watch, with its query: which selectors and pages each client sends.
        {"level": "Metadata", "verbs": ["list", "watch"]},
        {"level": "None"},
    ],
}
# Every request of every client, for counting what a client sends (benchmarks/operator_scale.py);
# each event names its client's user agent.
AUDIT_EVERYTHING: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}
