"""Kueue: the Workload a queued TFJob asks admission with, and what Kueue's answer means for
the job. Pure functions, like every other child.

Kueue's scheduler and Workload controller admit what a Workload describes, whoever owns it. The
operator plays the part Kueue's own job controllers play (`jobframework`): it creates the
Workload, starts the job once it is admitted, with the admitted flavors' node labels and
tolerations, stops it when it is evicted and then gives the quota reservation back, keeps the
PodsReady condition and marks the Workload Finished. The fields follow Kueue's v1beta2 API
(Kueue v0.19); v1beta1 differs only in how the priority class is named.

One module a question: queue.py (which LocalQueue and priority a job has; the view the rules
get) · workload.py (the Workload built from the spec, and when it is stale) · admission.py (what
Kueue's admission says, read back: flavors, placements) · workload_status.py (the Workload's
status the operator writes) · messages.py (what the job says while Kueue holds it). This module
holds the names on the wire, which all of them and the controller use.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from tfjob_operator.api.spec import GROUP as TFJOB_GROUP
from tfjob_operator.api.spec import ReplicaType

GROUP = "kueue.x-k8s.io"
VERSIONS = ("v1beta2", "v1beta1")  # newest first: the one used is the newest served
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Kueue's label for a WorkloadPriorityClass; it comes before the pods' PriorityClass.
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
POD_PRIORITY_GROUP = "scheduling.k8s.io"  # the pods' PriorityClasses
PODSETS_HASH = f"{TFJOB_GROUP}/podsets-hash"
# ... and of what admission decides on (counts, requests, placement, queue): a Workload
# that holds quota is replaced only when this changes, so that a new image, or an operator
# upgrade that renders pods anew, rolls the pods instead of sending the job back to the queue.
# Neither hash covers the priority nor `active`: those change in place (Kueue's own controllers
# rewrite spec.priority when a WorkloadPriorityClass' value changes).
ADMISSION_HASH = f"{TFJOB_GROUP}/admission-hash"

# Topology-aware scheduling (TAS), as Kueue's jobframework does it. The pod template
# annotations a topologyRequest is built from (apis/kueue/v1beta2/topology_types.go) ...
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_TOPOLOGY = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
PODSET_GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
# ... the label that ranks a StatefulSet's pods (Kueue's StatefulSet integration uses it) ...
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
# ... and what an admitted pod carries so that Kueue's TopologyUngater finds it (by the
# workload annotation and podset label) and lifts the gate on the domain assigned to it.
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
PODSET_LABEL = "kueue.x-k8s.io/podset"

# Kueue's own integrations (pod, statefulset) taking our children for theirs: the gate its pod
# webhook adds, the label it marks such pods with, and what its StatefulSet webhook writes
# into a StatefulSet it suspends (pkg/controller/jobs/pod/constants, pkg/constants).
ADMISSION_GATE = "kueue.x-k8s.io/admission"
MANAGED_LABEL = "kueue.x-k8s.io/managed"
SUSPENDED_BY_PARENT = "kueue.x-k8s.io/pod-suspending-parent"
# On a Workload the operator deactivated because its job is suspended (runPolicy.suspend): only
# such a Workload is made active again on resume, not one Kueue or an admin deactivated.
DEACTIVATED_BY_SUSPEND = f"{TFJOB_GROUP}/deactivated-by-suspend"
# The Workload's spec fields that carry its priority (v1beta2; v1beta1).
PRIORITY_FIELDS = ("priority", "priorityClassRef", "priorityClassName", "priorityClassSource")
# v1beta1's priorityClassSource -> the class' API group.
PRIORITY_SOURCES = {
    "scheduling.k8s.io/priorityclass": POD_PRIORITY_GROUP,
    "kueue.x-k8s.io/workloadpriorityclass": GROUP,
}


def podset_name(rt: ReplicaType) -> str:
    return rt.value.lower()


def workload_name(job: str, uid: str) -> str:
    """Like Kueue's own: the kind, the job's name, and a hash that tells a re-created job's
    Workload apart (a name is at most 253 characters)."""
    digest = hashlib.sha256(f"{job}/{uid}".encode()).hexdigest()[:5]
    return f"tfjob-{job[:240]}-{digest}"


def external_framework(group: str) -> str:
    """The entry of Kueue's `integrations.externalFrameworks` that makes a TFJob of `group` a
    job Kueue knows (Kind.version.group), so that its webhooks leave our children alone."""
    return f"TFJob.v1.{group}"


def _gates(spec: Mapping[str, Any]) -> set[str]:
    return {g.get("name", "") for g in spec.get("schedulingGates") or [] if isinstance(g, dict)}


def pod_takeover(pod: Mapping[str, Any]) -> str:
    """What shows that Kueue's pod integration took one of our pods for its own ("" when
    nothing does): its admission gate, or its managed label."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if ADMISSION_GATE in _gates(spec):
        return f"scheduling gate {ADMISSION_GATE}"
    if (meta.get("labels") or {}).get(MANAGED_LABEL) == "true":
        return f"label {MANAGED_LABEL}"
    return ""


def statefulset_takeover(sts: Mapping[str, Any]) -> str:
    """What shows that Kueue's StatefulSet integration took one of ours ("" when nothing
    does): a queue label on it (the operator never puts one there), its suspending-parent
    annotation or the admission gate on the pod template."""
    meta = sts.get("metadata") or {}
    template = (sts.get("spec") or {}).get("template") or {}
    if QUEUE_LABEL in (meta.get("labels") or {}):
        return f"label {QUEUE_LABEL}"
    if SUSPENDED_BY_PARENT in ((template.get("metadata") or {}).get("annotations") or {}):
        return f"pod template annotation {SUSPENDED_BY_PARENT}"
    if ADMISSION_GATE in _gates(template.get("spec") or {}):
        return f"pod template scheduling gate {ADMISSION_GATE}"
    return ""
