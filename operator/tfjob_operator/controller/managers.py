"""Who runs a job, settled before a reconcile decides anything of it: MultiKueue on a worker
cluster (`spec.managedBy`, defaulted here as Kueue's webhook defaults it for its own kinds),
another controller (`runPolicy.managedBy`, or children it started: `rules/handover.py`), or
this operator, with Kueue's own integrations kept off the children it makes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import kubernetes

from tfjob_operator.api.spec import MULTIKUEUE
from tfjob_operator.controller.apply import post_events, write_status
from tfjob_operator.controller.client import Kube
from tfjob_operator.controller.jobstate import JobKey, JobState
from tfjob_operator.controller.refusals import api_message
from tfjob_operator.controller.workloads import Workloads
from tfjob_operator.rules import handover
from tfjob_operator.rules.children import Built
from tfjob_operator.rules.kueue import multikueue
from tfjob_operator.rules.kueue.queue import Queueing, queue_label_patch, queue_name
from tfjob_operator.rules.lifecycle import JobView
from tfjob_operator.rules.lifecycle.suspension import dispatched_workload
from tfjob_operator.rules.pods import PodObservation
from tfjob_operator.rules.statefulsets import StatefulSetObservation

log = logging.getLogger(__name__)


async def default_managed_by(
    kube: Kube,
    workloads: Workloads,
    queueing: Queueing | None,
    key: JobKey,
    body: dict[str, Any],
    job: JobState,
) -> bool:
    """`spec.managedBy` set to MultiKueue, as Kueue's webhook sets it for its own kinds, on
    a job not yet started whose LocalQueue leads to a MultiKueue admission check
    (`--kueue`); asked once a job. True when it was set now."""
    meta = body["metadata"]
    if queueing is None or job.multikueue_checked:
        return False
    queue = queue_name(meta.get("labels") or {}, queueing)
    if queue is None or not multikueue.may_default(body):
        job.multikueue_checked = True
        return False
    checks = await workloads.multikueue_checks(key[0], queue)
    job.multikueue_checked = True
    if not multikueue.defaults_to_multikueue(body, checks):
        return False
    log.info("%s/%s: LocalQueue %s dispatches with MultiKueue: spec.managedBy set", *key, queue)
    try:
        await asyncio.to_thread(kube.patch_job, *key, {"spec": {"managedBy": MULTIKUEUE}})
    except kubernetes.client.ApiException as e:
        if e.status != 422:  # started meanwhile: it runs here
            raise
        log.info("%s/%s: not set: %s", *key, api_message(e))
        return False
    return True


async def run_dispatched(
    kube: Kube,
    workloads: Workloads,
    key: JobKey,
    body: dict[str, Any],
    job: JobState,
    view: JobView,
    render: Callable[[JobView], Built],
) -> float | None:
    """A job MultiKueue runs on a worker cluster: its Workload only, and one Event (no
    child, no status: Kueue copies the worker's into it). Its pod templates are `render`'s,
    made only once its queue is known."""
    name = f"{key[0]}/{key[1]}"
    assert view.spec is not None
    if job.managed_by != MULTIKUEUE:
        post_events(kube, key, body, [multikueue.dispatched_event(name)])
        job.managed_by = MULTIKUEUE
    queue = await workloads.queue_view(job, key, body, view)
    if queue is None:
        if not job.kueue_warned:
            post_events(kube, key, body, [multikueue.no_queue_event(name)])
            job.kueue_warned = True
        return None
    decision = dispatched_workload(render(view), queue, view.status, view.spec.run_policy.suspend)
    return await workloads.apply(job, key, queue.version, decision)


async def run_elsewhere(kube: Kube, key: JobKey, body: dict[str, Any], job: JobState) -> bool:
    """Whether another controller runs the job (`handover`): then nothing of ours is
    made, and the user is told once."""
    name = f"{key[0]}/{key[1]}"
    manager = handover.managed_elsewhere(body.get("spec"))
    if manager is not None:
        if job.managed_by != manager:
            log.info("%s: runPolicy.managedBy is %s; leaving it alone", name, manager)
            events = [handover.managed_elsewhere_event(name, manager)]
            post_events(kube, key, body, events)
            job.managed_by = manager
        return True
    job.managed_by = ""
    status = body.get("status")
    if not handover.may_be_started_elsewhere(status):
        return False
    uid = body["metadata"].get("uid", "")
    foreign = await asyncio.to_thread(kube.foreign_children, *key, uid)
    decision = handover.started_elsewhere(dict(status or {}), foreign, name, datetime.now(UTC))
    if decision is None:
        return False
    await write_status(kube, job, key, body, decision)
    return True


async def keep_kueue_off(
    kube: Kube,
    queueing: Queueing | None,
    key: JobKey,
    body: dict[str, Any],
    job: JobState,
    sets: list[StatefulSetObservation],
    pods: list[PodObservation],
) -> None:
    """What keeps Kueue's own integrations off our children: the queue label on a job
    that --kueue-manage-all queues without one (patched once, before its children are
    made), and a Warning, once, when they took a child all the same. Reads only what the
    indexes hold: no request but the patch and the Event."""
    patch = queue_label_patch(body["metadata"].get("labels") or {}, queueing)
    if patch and not job.queue_labelled:
        log.info("%s/%s: labelling it for LocalQueue default (--kueue-manage-all)", *key)
        await asyncio.to_thread(kube.patch_job, *key, patch)
        job.queue_labelled = True
    if not job.kueue_warned:
        event = handover.kueue_took_over(f"{key[0]}/{key[1]}", kube.group, sets, pods)
        if event is not None:
            post_events(kube, key, body, [event])
            job.kueue_warned = True
