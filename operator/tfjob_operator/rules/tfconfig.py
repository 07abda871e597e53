"""TF_CONFIG: the contract between the operator and any TensorFlow program in the pods.

TensorFlow reads the cluster layout from the TF_CONFIG env var. The operator writes one template
per replica type in which Kubernetes expands `$(TFJOB_TASK_INDEX)` (filled from the pod-index
label by the downward API), so every pod gets its own valid TF_CONFIG with no wrapper.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from tfjob_operator.api.spec import ReplicaType
from tfjob_operator.rules import naming

ENV_TF_CONFIG = "TF_CONFIG"
ENV_TASK_INDEX = "TFJOB_TASK_INDEX"
INDEX_REFERENCE = f"$({ENV_TASK_INDEX})"
_INDEX_PLACEHOLDER = "__TFJOB_TASK_INDEX__"


def cluster_map(
    replicas: Mapping[ReplicaType, int], address: Callable[[ReplicaType, int], str]
) -> dict[str, list[str]]:
    """The `cluster` map: every task's address, by lower-case task type, wherever the tasks
    run (pods on a cluster, processes on 127.0.0.1).

    The Evaluator is left out: it is not part of the training cluster, and listing it makes
    ParameterServerStrategy wait for it forever.
    """
    return {
        rt.task_type: [address(rt, i) for i in range(count)]
        for rt, count in replicas.items()
        if rt is not ReplicaType.EVALUATOR and count > 0
    }


def cluster_spec(
    job: str,
    namespace: str,
    replicas: Mapping[ReplicaType, int],
    ports: Mapping[ReplicaType, int],
    cluster_domain: str,
) -> dict[str, list[str]]:
    """The `cluster` map of a job's pods, at their stable DNS names."""
    return cluster_map(
        replicas,
        lambda rt, i: naming.pod_address(job, rt, i, namespace, cluster_domain, ports[rt]),
    )


def tf_config(cluster: Mapping[str, list[str]], rt: ReplicaType, index: int) -> str:
    """TF_CONFIG of one task, as TensorFlow expects it."""
    return json.dumps(
        {
            "cluster": dict(cluster),
            "task": {"type": rt.task_type, "index": index},
            "environment": "cloud",
        },
        sort_keys=True,
    )


def tf_config_template(cluster: Mapping[str, list[str]], rt: ReplicaType) -> str:
    """TF_CONFIG of every pod of a replica type, with the index left to Kubernetes."""
    body = json.dumps(
        {
            "cluster": dict(cluster),
            "task": {"type": rt.task_type, "index": _INDEX_PLACEHOLDER},
            "environment": "cloud",
        },
        sort_keys=True,
    )
    return body.replace(f'"{_INDEX_PLACEHOLDER}"', INDEX_REFERENCE)


def expand(template: str, index: int) -> str:
    """What Kubernetes makes of a template for the pod with this ordinal."""
    return template.replace(INDEX_REFERENCE, str(index))
