"""What Kubeflow's clients read of a TFJob's children: the `training.kubeflow.org/*` labels.

Kubeflow's Training SDK finds pods by these labels (`get_job_pods`, `get_job_logs`), Katib finds
a trial's primary pod by the job role, and Kueue and users' scripts select by them. Every pod
and Service of ours carries them, whichever API group the operator serves.

A StatefulSet's pods share one template, so what differs from pod to pod, the replica index
(and the master role of worker 0 in a job without a Chief), is written on each pod as it is
made, where the cluster admits pods through the MutatingAdmissionPolicies of `label_policies`
(Kubernetes 1.36+, installed with the operator): Katib's pod webhook, which comes after them,
then finds a Worker-only trial's primary pod by its role. Elsewhere it is written once the pod
exists: `pod_label_patches`. That is a write per pod, so it is made only for the
jobs Kubeflow's clients look at, those of Kubeflow's own group (`per_pod_labels`); a pod of a
`tfjob.dev` job is found by `tfjob.dev/replica-type` and Kubernetes' own
`apps.kubernetes.io/pod-index`. A replica type that has at most one pod carries both in its
template and costs no write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tfjob_operator.api.spec import GROUP, KUBEFLOW_GROUP, ReplicaType

PREFIX = "training.kubeflow.org"
JOB_NAME = f"{PREFIX}/job-name"
REPLICA_TYPE = f"{PREFIX}/replica-type"
REPLICA_INDEX = f"{PREFIX}/replica-index"
JOB_ROLE = f"{PREFIX}/job-role"
OPERATOR_NAME = f"{PREFIX}/operator-name"
MASTER_ROLE = "master"
# The value Kubeflow's own TFJob controller writes: clients that select by it find our pods too.
OPERATOR = "tfjob-controller"
# Replica types that never have more than one pod: index and role fit in the template.
SINGLE = (ReplicaType.CHIEF, ReplicaType.MASTER, ReplicaType.EVALUATOR)


def labels(job: str, rt: ReplicaType) -> dict[str, str]:
    """The labels a replica type's Service, StatefulSet and pods carry."""
    return {JOB_NAME: job, OPERATOR_NAME: OPERATOR, REPLICA_TYPE: rt.task_type}


def template_labels(job: str, rt: ReplicaType) -> dict[str, str]:
    """The labels a replica type's pod template carries: per-pod ones where there is one pod."""
    out = labels(job, rt)
    if rt in SINGLE:
        out[REPLICA_INDEX] = "0"
    if rt.is_chief_like:
        out[JOB_ROLE] = MASTER_ROLE
    return out


# On the Worker template of a job without a Chief (or Master): its pod 0 is the master.
FIRST_ROLE = f"{GROUP}/index-0-role"


def template_annotations(rt: ReplicaType, has_chief: bool) -> dict[str, str]:
    """What tells `label_policies` that a pod of this template at index 0 is the master."""
    return {FIRST_ROLE: MASTER_ROLE} if rt is ReplicaType.WORKER and not has_chief else {}


POLICY_API = "admissionregistration.k8s.io/v1"
POD_INDEX = "apps.kubernetes.io/pod-index"
MANAGED = {"app.kubernetes.io/managed-by": "tfjob-operator"}
# (name, CEL match condition, the labels' CEL map): each pod's index, and worker 0's role.
_POLICIES = (
    (
        "tfjob-operator-replica-index",
        f'object.metadata.?labels[?"{POD_INDEX}"].hasValue()'
        f' && !object.metadata.?labels[?"{REPLICA_INDEX}"].hasValue()',
        f'{{"{REPLICA_INDEX}": object.metadata.labels["{POD_INDEX}"]}}',
    ),
    (
        "tfjob-operator-first-worker-role",
        f'object.metadata.?labels[?"{POD_INDEX}"].orValue("") == "0"'
        f' && object.metadata.?annotations[?"{FIRST_ROLE}"].orValue("") == "{MASTER_ROLE}"',
        f'{{"{JOB_ROLE}": "{MASTER_ROLE}"}}',
    ),
)


def label_policies() -> list[dict[str, Any]]:
    """MutatingAdmissionPolicies and their bindings that give each pod of ours, as it is made,
    its own Kubeflow labels: for every API group served (the labels are Kubeflow's)."""
    docs: list[dict[str, Any]] = []
    for name, condition, labels in _POLICIES:
        docs.append(
            {
                "apiVersion": POLICY_API,
                "kind": "MutatingAdmissionPolicy",
                "metadata": {"name": name},
                "spec": {
                    "failurePolicy": "Ignore",
                    "reinvocationPolicy": "Never",
                    "matchConstraints": {
                        "objectSelector": {"matchLabels": dict(MANAGED)},
                        "resourceRules": [
                            {
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "operations": ["CREATE"],
                                "resources": ["pods"],
                            }
                        ],
                    },
                    "matchConditions": [{"name": "unlabelled", "expression": condition}],
                    "mutations": [
                        {
                            "patchType": "ApplyConfiguration",
                            "applyConfiguration": {
                                "expression": "Object{metadata: Object.metadata{labels: "
                                + labels
                                + "}}"
                            },
                        }
                    ],
                },
            }
        )
        docs.append(
            {
                "apiVersion": POLICY_API,
                "kind": "MutatingAdmissionPolicyBinding",
                "metadata": {"name": name},
                "spec": {"policyName": name},
            }
        )
    return docs


def per_pod_labels(api_version: str) -> bool:
    """Whether a job's pods get their own index and role labels: the jobs of Kubeflow's group,
    which its SDK, Katib and the scripts written for them read."""
    return api_version.partition("/")[0] == KUBEFLOW_GROUP


def pod_labels(rt: ReplicaType, index: int, has_chief: bool) -> dict[str, str]:
    """What one pod carries besides its template's labels: its index, and the master role
    for worker 0 when the job has no Chief (or Master), as Kubeflow does."""
    if rt in SINGLE:
        return {}
    out = {REPLICA_INDEX: str(index)}
    if rt is ReplicaType.WORKER and index == 0 and not has_chief:
        out[JOB_ROLE] = MASTER_ROLE
    return out


def pod_label_patches(
    pods: Iterable[tuple[str, str, ReplicaType, int, Mapping[str, str]]], has_chief: bool
) -> list[tuple[str, str, dict[str, str]]]:
    """(pod name, uid, labels to add) for each pod that lacks its own labels; pods are
    (name, uid, replica type, index, the Kubeflow labels the pod has)."""
    patches = []
    for name, uid, rt, index, have in pods:
        want = pod_labels(rt, index, has_chief)
        missing = {k: v for k, v in want.items() if have.get(k) != v}
        if missing:
            patches.append((name, uid, missing))
    return patches
