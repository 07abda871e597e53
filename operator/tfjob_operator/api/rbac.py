"""The operator's permissions, least privilege, in one place: what it calls, and nothing else.

`manifests/rbac.yaml` and the Helm chart's ClusterRole are generated from `RULES`
(`python -m tfjob_operator.render`), and a test compares the rules with the calls the operator
makes.
"""

from __future__ import annotations

from typing import Any

from tfjob_operator.api.spec import GROUP, KUBEFLOW_GROUP, PLURAL

WATCH = ["list", "watch"]


def job_rules(group: str) -> list[dict[str, Any]]:
    """The TFJobs of the API group the operator serves."""
    return [
        # Watched by kopf; deleted when ttlSecondsAfterFinished passes.
        {"apiGroups": [group], "resources": [PLURAL], "verbs": [*WATCH, "delete"]},
        {"apiGroups": [group], "resources": [f"{PLURAL}/status"], "verbs": ["patch"]},
        # Children carry blockOwnerDeletion, which needs this where the
        # OwnerReferencesPermissionEnforcement admission plugin is on.
        {"apiGroups": [group], "resources": [f"{PLURAL}/finalizers"], "verbs": ["update"]},
    ]


# Everything but the TFJobs: the same whichever group is served.
CHILD_RULES: list[dict[str, Any]] = [
    # Server-side apply (a patch that may create); delete for a replica type the spec dropped;
    # get: whose is one that a new job's create found there already.
    {
        "apiGroups": ["apps"],
        "resources": ["statefulsets"],
        "verbs": [*WATCH, "get", "create", "patch", "delete"],
    },
    {
        "apiGroups": [""],
        "resources": ["services"],
        "verbs": [*WATCH, "get", "create", "patch", "delete"],
    },
    # The job's TensorBoard (spec.tensorboard): applied, and deleted when it leaves the spec.
    {
        "apiGroups": ["apps"],
        "resources": ["deployments"],
        "verbs": [*WATCH, "get", "create", "patch", "delete"],
    },
    # Checkpoint claims are created once, never changed.
    {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": [*WATCH, "create"]},
    # Each pod's own Kubeflow labels (replica index, master role) are patched in once; a pod
    # whose node stopped answering is deleted (runPolicy.nodeLostTimeoutSeconds).
    {"apiGroups": [""], "resources": ["pods"], "verbs": [*WATCH, "patch", "delete"]},
    # Events: ours to write; a StatefulSet's FailedCreate to read while it lacks pods.
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "list"]},
    # kopf: discovers the CRD, and follows namespaces when --namespace has a glob.
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": WATCH,
    },
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": WATCH},
    # Gang scheduling (--gang-scheduler): the job's PodGroup, server-side applied; with
    # Kubernetes' own, the Workload it is made from too.
    {
        "apiGroups": ["scheduling.volcano.sh", "scheduling.x-k8s.io"],
        "resources": ["podgroups"],
        "verbs": [*WATCH, "create", "patch"],
    },
    {
        "apiGroups": ["scheduling.k8s.io"],
        "resources": ["podgroups", "workloads"],
        "verbs": [*WATCH, "create", "patch"],
    },
]


# Kueue (--kueue), granted only when it is turned on (chart value kueue.enabled, or
# manifests/kueue-rbac.yaml): each queued job's Workload, updated in place (patch), and its
# status (the quota reservation given back after an eviction, PodsReady, Finished) ...
KUEUE_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["workloads"],
        # get: the one MultiKueue made on a worker for a job, read once if its watch event
        # came before the job's
        "verbs": ["get", *WATCH, "create", "patch", "delete"],
    },
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status"], "verbs": ["patch"]},
    # MultiKueue: the LocalQueue a new job names, read once, to default its spec.managedBy.
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["localqueues"], "verbs": ["get"]},
    # --kueue-manage-all: the queue label written once on a job queued without it (either
    # group: these rules do not depend on the group served).
    {"apiGroups": [KUBEFLOW_GROUP, GROUP], "resources": [PLURAL], "verbs": ["patch"]},
]
# ... and, read-only and cluster-scoped, the admitted ResourceFlavors (node labels and
# tolerations) and the priority class a Workload names (its value); the PriorityClasses are
# listed too, for the global default of a job that names none.
KUEUE_CLUSTER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": [
            "resourceflavors",
            "workloadpriorityclasses",
            "clusterqueues",
        ],
        "verbs": ["get"],
    },
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["admissionchecks"], "verbs": ["list"]},
    {
        "apiGroups": ["scheduling.k8s.io"],
        "resources": ["priorityclasses"],
        "verbs": ["get", "list"],
    },
]


# Not the operator's: what Kueue's own ServiceAccount needs once TFJobs are one of its
# `integrations.externalFrameworks`. Its webhooks read (through an informer) the TFJob that owns
# our StatefulSets and pods, and refuse the child (fail closed) when they cannot.
KUEUE_READER_RULES: list[dict[str, Any]] = [
    {"apiGroups": [GROUP, KUBEFLOW_GROUP], "resources": [PLURAL], "verbs": ["get", *WATCH]},
]
# ... and on a MultiKueue manager cluster (chart value kueue.multikueue.manager): the TFJobs it
# dispatches, their status copied back from the worker.
KUEUE_MANAGER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [GROUP, KUBEFLOW_GROUP],
        "resources": [PLURAL],
        "verbs": ["get", *WATCH, "patch", "update"],
    },
    {
        "apiGroups": [GROUP, KUBEFLOW_GROUP],
        "resources": [f"{PLURAL}/status"],
        "verbs": ["get", "patch", "update"],
    },
]
# Not the operator's either: what the identity in a MultiKueue worker's kubeconfig needs on the
# worker (chart value kueue.multikueue.worker): the TFJobs copied there, and Kueue's Workloads
# (as Kueue's own test/util/multikueue.go grants them).
_ALL = ["create", "update", "patch", "delete", "get", *WATCH]
MULTIKUEUE_WORKER_RULES: list[dict[str, Any]] = [
    {"apiGroups": [GROUP, KUBEFLOW_GROUP], "resources": [PLURAL], "verbs": _ALL},
    {"apiGroups": [GROUP, KUBEFLOW_GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["get"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": _ALL},
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["workloads/status"],
        "verbs": ["get", "patch", "update"],
    },
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["clusterqueues", "localqueues"],
        "verbs": ["get", *WATCH],
    },
    # Kueue's batch/job integration is always on (its default when none is listed), and
    # MultiKueue watches each integration's kind on every worker: read only.
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", *WATCH]},
]
# Kueue's ServiceAccount as its chart and manifests name it ({fullname}-controller-manager).
KUEUE_SERVICE_ACCOUNT = "kueue-controller-manager"
KUEUE_NAMESPACE = "kueue-system"
# Not the operator's: what Katib's controller needs beside its own ClusterRole to run trials
# that are our TFJobs. Its trial controller creates, watches and deletes the trial's TFJob (its
# role names kubeflow.org's, not ours), and its pod webhook follows a pod's owners up to the
# Trial: our StatefulSet lies between, which its role cannot read, and the pod then gets no
# metrics collector.
KATIB_RULES: list[dict[str, Any]] = [
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["get", *WATCH, "create", "delete"]},
    {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get"]},
]
# Katib's ServiceAccount as its manifests name it.
KATIB_SERVICE_ACCOUNT = "katib-controller"
KATIB_NAMESPACE = "kubeflow"


def rules(group: str = GROUP, kueue: bool = False) -> list[dict[str, Any]]:
    """The operator's rules when it serves `group` (with Kueue, when `kueue`)."""
    extra = [*KUEUE_RULES, *KUEUE_CLUSTER_RULES] if kueue else []
    return [*job_rules(group), *CHILD_RULES, *extra]


RULES = rules()

# Leader election, granted by a Role in the operator's own namespace only.
LEASE_NAME = "tfjob-operator-leader"
LEASE_RULES: list[dict[str, Any]] = [
    # create cannot be limited by name; reading and renewing are limited to our Lease.
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": [LEASE_NAME],
        "verbs": ["get", "update"],
    },
]


def grants(group: str, resource: str, verb: str) -> bool:
    return any(
        group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in RULES
    )
