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
Kueue's admission says, read back: flavors, placements) · status.py (the Workload's status the
operator writes) · messages.py (what the job says while Kueue holds it). This module holds the
names on the wire, which all of them and the controller use.
"""

from __future__ import annotations

import hashlib

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
# ... and of what admission decides on (counts, requests, placement, priority): a Workload
# that holds quota is replaced only when this changes, so that a new image, or an operator
# upgrade that renders pods anew, rolls the pods instead of sending the job back to the queue.
ADMISSION_HASH = f"{TFJOB_GROUP}/admission-hash"


def podset_name(rt: ReplicaType) -> str:
    return rt.value.lower()


def workload_name(job: str, uid: str) -> str:
    """Like Kueue's own: the kind, the job's name, and a hash that tells a re-created job's
    Workload apart (a name is at most 253 characters)."""
    digest = hashlib.sha256(f"{job}/{uid}".encode()).hexdigest()[:5]
    return f"tfjob-{job[:240]}-{digest}"
