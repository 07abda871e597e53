"""Whether a job may run now: not while its spec suspends it, nor while Kueue holds it (queued
or evicted); and the job's Kueue Workload, which asks for its admission."""

from __future__ import annotations

from datetime import datetime

from tfjob_operator.api.spec import ReplicaType, TFJobSpec
from tfjob_operator.rules import status as st
from tfjob_operator.rules.children import Built, Manifest
from tfjob_operator.rules.kueue import JOB_UID_LABEL, multikueue
from tfjob_operator.rules.kueue.admission import Placement, WorkloadObservation, placements
from tfjob_operator.rules.kueue.messages import (
    ADMITTED,
    EVICTED,
    QUEUED,
    admitted_message,
    waiting_message,
)
from tfjob_operator.rules.kueue.queue import QueueView
from tfjob_operator.rules.kueue.workload import (
    WorkloadDecision,
    admission_hash,
    podsets,
    stale,
    workload,
    workload_update,
)
from tfjob_operator.rules.kueue.workload_status import workload_status
from tfjob_operator.rules.lifecycle.change import Change, Condition
from tfjob_operator.rules.lifecycle.observation import Observation


def wanted_workload(built: Built, queue: QueueView) -> Manifest:
    """The Workload the job asks admission with, as it stands now: its pod templates as
    rendered for its children, before admission places them; inactive while the job's spec
    suspends it."""
    sets = podsets(built.spec, built.templates)
    active = not built.spec.run_policy.suspend
    return workload(built.job, queue.version, queue.queue, sets, queue.priority, active)


def admission(
    queue: QueueView | None, wanted: Manifest | None
) -> tuple[bool, dict[ReplicaType, Placement] | None]:
    """(held, placements): whether Kueue holds the job back, and where admission puts each
    replica type's pods. A Workload that no longer matches the spec admits nothing."""
    if queue is None or wanted is None:
        return False, None
    wl = queue.workload
    if wl is None or not wl.admitted or stale(wl, wanted):
        return True, None
    places = placements(wl, queue.flavors)
    return places is None, places


def stopped(suspend: bool, held: bool, queue: QueueView | None, name: str) -> Condition | None:
    """Why the job may not run now: suspended by its spec, or queued or evicted by Kueue;
    None when it may run. A user's suspend under Kueue is a suspend, as without Kueue: Kueue
    evicts the Workload the operator deactivates for it, but that eviction holds nothing
    (`WorkloadObservation.eviction`), so the job is queued, not evicted, once resumed."""
    if suspend:
        return Condition(
            st.Cond.SUSPENDED, True, st.Reason.SUSPENDED, f"TFJob {name} is suspended."
        )
    if not held:
        return None
    assert queue is not None
    evicted = queue.workload is not None and queue.workload.eviction is not None
    return Condition(
        st.Cond.SUSPENDED,
        True,
        EVICTED if evicted else QUEUED,
        f"TFJob {name} is {waiting_message(queue)}."
        if evicted
        else f"TFJob {name} is queued: {waiting_message(queue)}.",
    )


def resumed(
    status: st.Status,
    queue: QueueView | None,
    places: dict[ReplicaType, Placement] | None,
    name: str,
    now: datetime,
) -> Change:
    """A job that may run: admitted by Kueue or resumed, if it was suspended, and started. The
    deadline counts from the resume."""
    start = {"startTime": st.timestamp(now)}
    if not st.is_true(status, st.Cond.SUSPENDED):
        return Change() if "startTime" in status else Change(fields=start)
    # `places` is set only for a job whose Workload is admitted.
    wl = queue.workload if queue is not None and places is not None else None
    resume = Condition(
        st.Cond.SUSPENDED,
        False,
        ADMITTED if wl is not None else st.Reason.RESUMED,
        f"TFJob {name} is " + (admitted_message(wl) if wl is not None else "resumed") + ".",
    )
    return Change((resume,), start)


def _prebuilt(
    wl: WorkloadObservation, wanted: Manifest, finished: bool, now: datetime
) -> WorkloadDecision | None:
    """A Workload MultiKueue made for the job on this worker: taken as the job's (owned, as
    Kueue's jobframework owns one), and, should it no longer ask for what the job asks
    (counts, requests, placement, queue: the manager's operator may render templates
    otherwise), finished as out of sync for the manager to dispatch the job again; never
    updated nor replaced. None: go on to its status."""
    meta = wanted["metadata"]
    adopt = multikueue.adoption(wl, meta["ownerReferences"][0], meta["labels"][JOB_UID_LABEL])
    if adopt:
        return WorkloadDecision(update=adopt)
    if not finished and not wl.finished and wl.admission_hash != admission_hash(wanted["spec"]):
        return WorkloadDecision(status_patch=multikueue.out_of_sync(wl, now))
    return None


def workload_decision(
    queue: QueueView,
    wanted: Manifest,
    status: st.Status,
    spec: TFJobSpec,
    seen: Observation,
    finished: bool,
) -> WorkloadDecision:
    """Make the Workload; while the job is not done, replace one that holds quota for what the
    job no longer asks, or update it in place; else write its status. An update comes first:
    the status is written from the Workload it makes."""
    wl = queue.workload
    if wl is None:
        # A Workload Kueue makes (MultiKueue's on a worker) is waited for, never made.
        return WorkloadDecision(create=None if finished or queue.prebuilt else wanted)
    if queue.prebuilt:
        prebuilt = _prebuilt(wl, wanted, finished, seen.now)
        if prebuilt is not None:
            return prebuilt
    elif not finished:
        if wl.reserved and stale(wl, wanted):
            return WorkloadDecision(create=wanted, delete=wl.name)
        update = workload_update(wl, wanted, spec.run_policy.suspend)
        if update:
            return WorkloadDecision(update=update)
    verdict = None
    if finished:
        cond = st.find(
            status, st.Cond.SUCCEEDED if st.is_true(status, st.Cond.SUCCEEDED) else st.Cond.FAILED
        )
        verdict = (st.is_true(status, st.Cond.SUCCEEDED), str((cond or {}).get("message", "")))
    expected = sum(rs.replicas for rs in spec.replicas().values())
    ready = sum(1 for p in seen.pods if p.up and not p.deleting)
    return WorkloadDecision(
        status_patch=workload_status(
            wl,
            active_pods=sum(1 for p in seen.pods if p.running),
            pods_ready=ready >= expected > 0,
            finished=verdict,
            now=seen.now,
        )
    )


def dispatched_workload(
    built: Built, queue: QueueView, status: st.Status, suspend: bool
) -> WorkloadDecision:
    """A job MultiKueue runs elsewhere (this is its manager cluster): its Workload made, and
    kept up to date in place while it waits; Kueue writes its status and copies the job to a
    worker. A Workload that holds quota is never replaced: the worker runs the copy made at
    admission."""
    wl = queue.workload
    if wl is None:
        return WorkloadDecision(
            create=None if st.is_finished(status) else wanted_workload(built, queue)
        )
    if wl.finished or st.is_finished(status):
        return WorkloadDecision()
    return WorkloadDecision(update=workload_update(wl, wanted_workload(built, queue), suspend))
