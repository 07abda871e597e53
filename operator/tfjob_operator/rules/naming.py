"""Every name, label and DNS address the operator generates, and the limits they must fit."""

from __future__ import annotations

import re
from collections.abc import Iterable

from tfjob_operator.api.spec import GROUP, GROUPS, ReplicaType

# A StatefulSet's name goes into its pods' controller-revision-hash label (name + '-' + hash),
# which must fit in 63 characters: Kubernetes keeps StatefulSet names to 52.
MAX_STATEFULSET_NAME = 52

LABEL_JOB_NAME = f"{GROUP}/job-name"
LABEL_REPLICA_TYPE = f"{GROUP}/replica-type"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_COMPONENT = "app.kubernetes.io/component"
MANAGED_BY = "tfjob-operator"
# Kubernetes >= 1.28 labels every StatefulSet pod with its ordinal.
LABEL_POD_INDEX = "apps.kubernetes.io/pod-index"
# ... and with the revision of its StatefulSet's template it was made from.
LABEL_REVISION = "controller-revision-hash"

FIELD_MANAGER = "tfjob-operator"
# A hash of a StatefulSet as the operator built it: after a start, it tells a child the job's
# spec changed from one it is about to apply again (`children.stamped`).
ANNOTATION_BUILT = f"{GROUP}/built"
# On a pod template, and so on its pods: a hash of what the user wrote that shaped it
# (`children.spec_hash`). A pod rolls only when that changes (`lifecycle.restart`).
ANNOTATION_SPEC_HASH = f"{GROUP}/spec-hash"
CHECKPOINT_VOLUME = "tfjob-checkpoints"
# On every pod where a task's exit may end it (container restart rules): holds a pod whose task
# ended while its StatefulSet would make it again (`lifecycle.ended`). One per API group served,
# so that each operator lets go of its own pods only.
FINALIZER_NAME = "task-ended"


def finalizer(group: str) -> str:
    """The finalizer the operator serving `group` puts on its pods."""
    return f"{group}/{FINALIZER_NAME}"


def finalizer_group(finalizers: Iterable[str]) -> str:
    """The API group whose operator holds a pod, from its finalizers ("" for none)."""
    for f in finalizers:
        group, _, name = f.partition("/")
        if name == FINALIZER_NAME and group in GROUPS:
            return group
    return ""


_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def replica_name(job: str, rt: ReplicaType) -> str:
    """Name of the Service and the StatefulSet of one replica type."""
    return f"{job}-{rt.task_type}"


def pod_name(job: str, rt: ReplicaType, index: int | str) -> str:
    """A pod's name; `index` may be a reference Kubernetes fills in (`tfconfig`)."""
    return f"{replica_name(job, rt)}-{index}"


def tensorboard_name(job: str) -> str:
    """The job's TensorBoard Deployment and Service."""
    return f"{job}-tensorboard"


def checkpoint_claim_name(job: str) -> str:
    return f"{job}-checkpoints"


def pod_address(
    job: str, rt: ReplicaType, index: int | str, namespace: str, cluster_domain: str, port: int
) -> str:
    """The stable DNS address of one pod through its headless Service."""
    service = replica_name(job, rt)
    return f"{pod_name(job, rt, index)}.{service}.{namespace}.svc.{cluster_domain}:{port}"


def selector_labels(job: str, rt: ReplicaType) -> dict[str, str]:
    """Labels that select one replica type's pods (immutable in a StatefulSet)."""
    return {LABEL_JOB_NAME: job, LABEL_REPLICA_TYPE: rt.task_type}


def child_labels(job: str, rt: ReplicaType | None = None) -> dict[str, str]:
    """Labels on everything the operator makes."""
    labels = {LABEL_JOB_NAME: job, LABEL_MANAGED_BY: MANAGED_BY}
    if rt is not None:
        labels[LABEL_REPLICA_TYPE] = rt.task_type
    return labels


def replica_type_of(task_type: str) -> ReplicaType | None:
    """Inverse of `ReplicaType.task_type`, for labels read back from pods."""
    for rt in ReplicaType:
        if rt.task_type == task_type:
            return rt
    return None


def pod_index(pod_name_: str) -> int | None:
    """The StatefulSet ordinal at the end of a pod name."""
    head, _, tail = pod_name_.rpartition("-")
    return int(tail) if head and tail.isdigit() else None


def statefulset_of(pod_name_: str) -> str:
    """The StatefulSet a pod of ours belongs to: its name without the ordinal."""
    return pod_name_.rpartition("-")[0]


def check_job_name(name: str, replica_types: Iterable[ReplicaType]) -> list[str]:
    """Problems with a job name: it must make valid, short-enough child names."""
    problems: list[str] = []
    if not _DNS1035.match(name):
        problems.append(
            f"metadata.name: '{name}' must start with a letter and hold only lower-case "
            "letters, digits and '-', because it names Services"
        )
    longest = max(replica_types, key=lambda rt: len(rt.task_type), default=None)
    if longest is not None and len(replica_name(name, longest)) > MAX_STATEFULSET_NAME:
        child = replica_name(name, longest)
        limit = MAX_STATEFULSET_NAME - len(longest.task_type) - 1
        problems.append(
            f"metadata.name: '{name}' is too long ({len(name)} characters): StatefulSet "
            f"'{child}' would have {len(child)}, the limit is {MAX_STATEFULSET_NAME}; "
            f"with a {longest.value} replica use at most {limit} characters"
        )
    return problems


def pod_group_name(job: str) -> str:
    """The job's PodGroup, for either gang scheduler: the job's own name, as in Kubeflow."""
    return job
