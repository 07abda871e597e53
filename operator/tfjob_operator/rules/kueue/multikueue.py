"""Kueue's MultiKueue, both ends of it, as Kueue's own job integrations play them.

On a manager cluster a job whose top-level `spec.managedBy` is Kueue's MultiKueue
(`dispatched`) gets its Workload and nothing else: Kueue copies the job to the worker cluster
that admits it, and the worker's status back into the job. The operator defaults the field, as
Kueue's webhook does for its own kinds, for a job not yet started whose LocalQueue leads to a
ClusterQueue with a MultiKueue admission check (`defaults_to_multikueue`).

On a worker cluster the copy names the Workload Kueue made for it first (`prebuilt_name`): the
operator takes that one for the job's (`adoption`) instead of making its own, and, should it
no longer describe the job, finishes it as out of sync (`out_of_sync`), so that the manager
dispatches the job afresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from tfjob_operator.api.spec import MULTIKUEUE
from tfjob_operator.rules import status as st
from tfjob_operator.rules.kueue import JOB_UID_LABEL, QUEUE_LABEL
from tfjob_operator.rules.kueue.admission import WorkloadObservation
from tfjob_operator.rules.kueue.workload_status import finished_patch

# Where Kueue names the Workload it made on the worker for a job it copied there: an
# annotation since Kueue v0.18 (WorkloadIdentifierAnnotations), a label before.
PREBUILT_WORKLOAD = "kueue.x-k8s.io/prebuilt-workload-name"
# The label Kueue puts on what it copied to a worker: the manager it came from.
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
# What Kueue's Workload controller finishes a prebuilt Workload with when it no longer
# describes its job; the manager then dispatches the job again.
OUT_OF_SYNC = "OutOfSync"


def dispatched(spec: Any) -> bool:
    """Whether MultiKueue runs the job elsewhere: this is its manager cluster (read leniently,
    as `handover` reads `runPolicy.managedBy`)."""
    return isinstance(spec, dict) and spec.get("managedBy") == MULTIKUEUE


def prebuilt_name(meta: Mapping[str, Any]) -> str | None:
    """The Workload Kueue made for this job on a worker cluster (annotation first, as Kueue
    reads it), or None for a job that was not dispatched here."""
    name = (meta.get("annotations") or {}).get(PREBUILT_WORKLOAD) or (meta.get("labels") or {}).get(
        PREBUILT_WORKLOAD
    )
    return name if isinstance(name, str) and name else None


def may_default(body: Mapping[str, Any]) -> bool:
    """Whether `spec.managedBy` may still be defaulted: the job has not started (no status),
    names no manager of its own, and was not itself dispatched here."""
    meta, spec = body.get("metadata") or {}, body.get("spec")
    if not isinstance(spec, dict) or "managedBy" in spec or body.get("status"):
        return False
    policy = spec.get("runPolicy")
    if isinstance(policy, dict) and policy.get("managedBy"):
        return False
    return prebuilt_name(meta) is None


def defaults_to_multikueue(
    body: Mapping[str, Any], checks: Iterable[Mapping[str, Any] | None]
) -> bool:
    """Whether the operator sets `spec.managedBy` to MultiKueue: it `may_default`, and one of
    the `checks` (the AdmissionChecks its LocalQueue's ClusterQueue lists) is MultiKueue's."""
    return may_default(body) and any(is_multikueue(check) for check in checks)


def is_multikueue(check: Mapping[str, Any] | None) -> bool:
    """Whether an AdmissionCheck is MultiKueue's."""
    return ((check or {}).get("spec") or {}).get("controllerName") == MULTIKUEUE


def admission_checks(cluster_queue: Mapping[str, Any] | None) -> list[str]:
    """The AdmissionChecks a ClusterQueue lists, both ways it can (`admissionChecks`, and
    `admissionChecksStrategy.admissionChecks`)."""
    spec = (cluster_queue or {}).get("spec") or {}
    names = [n for n in spec.get("admissionChecks") or [] if isinstance(n, str)]
    strategy = spec.get("admissionChecksStrategy") or {}
    names += [c.get("name", "") for c in strategy.get("admissionChecks") or [] if c.get("name")]
    return sorted(set(names))


def adoption(observed: WorkloadObservation, owner: Mapping[str, Any], uid: str) -> dict[str, Any]:
    """The merge patch that makes a prebuilt Workload the job's (its controller, and Kueue's
    job-uid label), as Kueue's jobframework does; {} when it is already."""
    if observed.controller_uid == uid:
        return {}
    return {
        "metadata": {
            "resourceVersion": observed.resource_version,
            "ownerReferences": [dict(owner)],
            "labels": {JOB_UID_LABEL: uid},
        }
    }


def taken(observed: WorkloadObservation, uid: str) -> bool:
    """Whether another object controls the prebuilt Workload: then it is not the job's, and
    the job waits (Kueue's jobframework leaves it so too)."""
    return bool(observed.controller_uid) and observed.controller_uid != uid


def out_of_sync(observed: WorkloadObservation, now: datetime) -> dict[str, Any]:
    """The status patch that finishes a prebuilt Workload that no longer describes its job."""
    message = "The prebuilt workload is out of sync with its user job"
    return finished_patch(observed, OUT_OF_SYNC, message, now)


def dispatched_event(name: str) -> tuple[str, str, str]:
    return (
        "Normal",
        st.Reason.DISPATCHED,
        f"TFJob {name} has spec.managedBy {MULTIKUEUE}: Kueue runs it on a worker cluster and "
        "copies its status here; tfjob-operator makes its Workload only.",
    )


def no_queue_event(name: str) -> tuple[str, str, str]:
    return (
        "Warning",
        st.Reason.NOT_DISPATCHED,
        f"TFJob {name} has spec.managedBy {MULTIKUEUE} but waits in no LocalQueue (label "
        f"{QUEUE_LABEL}, and the operator's --kueue): nothing dispatches it. Delete it and "
        "create it again with the label.",
    )
