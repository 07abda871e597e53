"""TF_CONFIG: the contract between the operator and any TensorFlow program in the pods.

TensorFlow reads the cluster layout from the TF_CONFIG env var. The operator writes one template
per replica type in which Kubernetes expands `$(TFJOB_TASK_INDEX)` (filled from the pod-index
label by the downward API), so every pod gets its own valid TF_CONFIG with no wrapper.

With `enableDynamicWorker` each task sees a sparse cluster (`sparse_cluster`), as Kubeflow's
training-operator writes it: a job of tasks as `{"<index>": "<address>"}` instead of a list, so
that a worker's TF_CONFIG names no other worker. Kubernetes expands the reference anywhere in
the value, JSON keys included, so the worker's own entry is a template too.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

from tfjob_operator.api.spec import ReplicaType
from tfjob_operator.rules import naming

ENV_TF_CONFIG = "TF_CONFIG"
ENV_TASK_INDEX = "TFJOB_TASK_INDEX"
INDEX_REFERENCE = f"$({ENV_TASK_INDEX})"
_INDEX_PLACEHOLDER = "__TFJOB_TASK_INDEX__"
# Linux refuses to start a program with an environment string longer than MAX_ARG_STRLEN (32
# pages: 131072 bytes, "TF_CONFIG=" and the closing NUL included): a larger TF_CONFIG is a
# container that can never start. Room is left for the task part and the JSON around.
MAX_ARG_STRLEN = 131072
MAX_TF_CONFIG_BYTES = MAX_ARG_STRLEN - len(f"{ENV_TF_CONFIG}=") - 1 - 512
_PORT_DIGITS = 5
# A TF_CONFIG `cluster`: each job's tasks as a list (dense), or as {"<index>": "<address>"}
# for only some of them (sparse, which TensorFlow's ClusterSpec takes too).
Cluster = Mapping[str, Sequence[str] | Mapping[str, str]]


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


def too_large(
    job: str, namespace: str, replicas: Mapping[ReplicaType, int], cluster_domain: str
) -> str | None:
    """Why the job's TF_CONFIG could not be set in a container (too many tasks for its names),
    or None: counted from the names' lengths before anything is rendered, so a spec of a
    million replicas costs no memory."""
    size = cluster_size(job, namespace, replicas, cluster_domain)
    if size <= MAX_TF_CONFIG_BYTES:
        return None
    tasks = sum(n for rt, n in replicas.items() if rt is not ReplicaType.EVALUATOR)
    return (
        f"spec.tfReplicaSpecs: {tasks} tasks make a TF_CONFIG of about {size} bytes, and Linux "
        f"starts no container with an environment variable over {MAX_ARG_STRLEN} bytes; "
        "use fewer replicas (or a shorter job name or namespace)"
    )


def cluster_size(
    job: str, namespace: str, replicas: Mapping[ReplicaType, int], cluster_domain: str
) -> int:
    """At least the bytes of the job's `cluster` map as JSON, counted, not rendered."""
    size = 2  # {}
    for rt, count in replicas.items():
        if rt is ReplicaType.EVALUATOR or count <= 0:
            continue
        # Each address once, quoted, with a comma and a space; its index's digits apart.
        address = naming.pod_address(job, rt, "", namespace, cluster_domain, 10**_PORT_DIGITS - 1)
        size += len(rt.task_type) + 8 + count * (len(address) + 4) + _digits(count)
    return size


def _digits(count: int) -> int:
    """The digits of the indexes 0 .. count-1, all together."""
    total, power = count, 10
    while power < count:
        total += count - power
        power *= 10
    return total


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


def sparse_cluster(
    cluster: Mapping[str, list[str]], rt: ReplicaType, index: str, own: str
) -> dict[str, list[str] | dict[str, str]]:
    """What one task of a job with `enableDynamicWorker` sees of the full `cluster`, given its
    `index` (a number, or `INDEX_REFERENCE` in a template) and its `own` address.

    As Kubeflow's sparse cluster spec: a parameter server sees only itself; a worker sees
    every parameter server and itself. So neither names any other worker, and a change in
    the worker count leaves their TF_CONFIG as it was. Where Kubeflow gives the others an
    empty cluster, which TensorFlow refuses (kubeflow/training-operator#1763), the chief (or
    master) sees every task it coordinates, as lists, and the evaluator sees itself and the
    chief (worker 0 when there is none).
    """
    if rt is ReplicaType.PS:
        return {rt.task_type: {index: own}}
    ps = {"ps": list(cluster["ps"])} if cluster.get("ps") else {}
    if rt is ReplicaType.WORKER:
        return {**ps, rt.task_type: {index: own}}
    if rt.is_chief_like:
        return {task: list(addresses) for task, addresses in cluster.items()}
    view: dict[str, list[str] | dict[str, str]] = {rt.task_type: [own]}
    chief = next(
        (t for t in (ReplicaType.CHIEF, ReplicaType.MASTER) if cluster.get(t.task_type)), None
    )
    if chief is not None:
        view[chief.task_type] = list(cluster[chief.task_type])
    elif cluster.get(ReplicaType.WORKER.task_type):
        view[ReplicaType.WORKER.task_type] = {"0": cluster[ReplicaType.WORKER.task_type][0]}
    return view


def tf_config(cluster: Cluster, rt: ReplicaType, index: int) -> str:
    """TF_CONFIG of one task, as TensorFlow expects it."""
    return json.dumps(
        {
            "cluster": dict(cluster),
            "task": {"type": rt.task_type, "index": index},
            "environment": "cloud",
        },
        sort_keys=True,
    )


def tf_config_template(cluster: Cluster, rt: ReplicaType) -> str:
    """TF_CONFIG of every pod of a replica type, with the index left to Kubernetes (in
    `task.index`, and wherever `cluster` holds `INDEX_REFERENCE`)."""
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
    """What Kubernetes makes of a template for the pod with this ordinal: every
    `$(TFJOB_TASK_INDEX)` replaced, in keys and values alike."""
    return template.replace(INDEX_REFERENCE, str(index))
