"""What a queued job says of Kueue: its Suspended condition's reasons while Kueue holds it and
once it admits it, the messages, and the pods its `waiting` status names meanwhile."""

from __future__ import annotations

from collections.abc import Iterable

from tfjob_operator.api.spec import TFJobSpec
from tfjob_operator.rules import naming
from tfjob_operator.rules import status as st
from tfjob_operator.rules.kueue.admission import WorkloadObservation
from tfjob_operator.rules.kueue.queue import QueueView

# Reasons of the job's Suspended condition while Kueue holds it, and once it admits it.
QUEUED, EVICTED, ADMITTED = st.Reason.QUEUED, st.Reason.EVICTED, st.Reason.ADMITTED


def waiting_message(view: QueueView) -> str:
    """Why a queued job has no pod, with Kueue's own word when it has said one."""
    wl = view.workload
    where = f"LocalQueue {view.queue}"
    if wl is None:
        return f"waiting for Kueue to admit it ({where}); creating its Workload"
    evicted = wl.eviction
    if evicted is not None:
        resumes = (
            f"when {where} admits Workload {wl.name} again"
            if wl.active
            else f"once Workload {wl.name} is active again and {where} admits it"
        )
        return (
            f"evicted by Kueue ({evicted.reason}: {evicted.message}); the pods stop, the "
            f"checkpoint stays, and the job resumes {resumes}"
        )
    if wl.deactivated_by_suspend:
        # Its user resumed it: the operator makes the Workload active in this decision, and
        # what Kueue says of it (deactivated) no longer holds.
        return (
            f"waiting for Kueue to admit Workload {wl.name} ({where}) again, now that the job "
            "is resumed"
        )
    if wl.is_true("QuotaReserved") and wl.checks_pending:
        return (
            f"Workload {wl.name} holds quota in ClusterQueue {wl.cluster_queue}; waiting for "
            f"admission checks {', '.join(wl.checks_pending)}"
        )
    said = wl.condition("QuotaReserved")
    # Not the word of a deactivation that is over: it is kept there until Kueue looks again.
    stale = wl.evicted is not None and said is not None and said.message == wl.evicted.message
    detail = f": {said.message}" if said is not None and said.message and not stale else ""
    return f"waiting for Kueue to admit Workload {wl.name} ({where}){detail}"


def admitted_message(wl: WorkloadObservation) -> str:
    shown = "; ".join(
        f"{podset}: {', '.join(f'{r}={f}' for r, f in assigned)}" for podset, assigned in wl.flavors
    )
    return f"admitted by Kueue in ClusterQueue {wl.cluster_queue} (flavors: {shown or 'none'})"


def pods_of(spec: TFJobSpec, job: str) -> Iterable[str]:
    """Every pod the job has when it runs, by name."""
    for rt, rs in spec.replicas().items():
        for i in range(rs.replicas):
            yield naming.pod_name(job, rt, i)
