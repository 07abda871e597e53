"""A `Decision` made true: the API calls for the children, the pods, the status and the
Events. The reconcile (`reconcile.py`) calls them in their order; the job's Kueue Workload is
`workloads.py`'s."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Iterator
from typing import Any

import kopf
import kubernetes

from tfjob_operator.controller import metrics
from tfjob_operator.controller.client import Kube, NotLeader
from tfjob_operator.controller.jobstate import JobKey, JobState, Written
from tfjob_operator.controller.projections import job_record
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle import Decision
from tfjob_operator.rules.lifecycle.limits import DONE_GRACE_SECONDS

log = logging.getLogger(__name__)

# A status write that changes only pod counts waits this long, so that the pods of a job that
# come up (or go away) together cost one write.
COUNTS_DELAY_SECONDS = 1.0
# A status write waits at most this long for the children being applied (`ChildrenFirst`).
STATUS_WAIT_SECONDS = 1.0


class ChildrenFirst:
    """Children before bookkeeping: while any job's children are being applied, status writes
    (and the Events that follow them) wait, for at most STATUS_WAIT_SECONDS. In a burst of new
    jobs, the StatefulSets that start the pods get the API server first."""

    def __init__(self) -> None:
        self._applying = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @contextlib.contextmanager
    def applying(self) -> Iterator[None]:
        self._applying += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._applying -= 1
            if not self._applying:
                self._idle.set()

    async def wait(self) -> None:
        if self._idle.is_set():
            return  # the common case: no task or timer made for nothing
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), STATUS_WAIT_SECONDS)


def apply_children(
    kube: Kube,
    children: list[dict[str, Any]],
    fresh: bool = False,
    changed: Collection[tuple[str, str]] = (),
    check: Collection[tuple[str, str]] = (),
) -> dict[str, int]:
    """Server-side apply each child (in a thread: the client blocks); each StatefulSet's
    generation as applied, by name. A `fresh` job's children are created; the `changed` ones,
    by (kind, name), owned as applied first; the ones to `check` looked at first, to take
    over none that no TFJob controls (`Kube.apply`)."""
    generations = {}
    for child in children:
        name = child["metadata"]["name"]
        at = (child["kind"], name)
        generation = kube.apply(child, fresh, at in changed, at in check)
        if generation is not None:
            generations[name] = generation
    return generations


def converge(kube: Kube, job: JobState, namespace: str, decision: Decision) -> None:
    """Scale down and delete the children the decision no longer wants (in a thread). A
    StatefulSet scaled down before is not asked again while the watch has not shown it yet."""
    for name in decision.scale_down:
        if name not in job.scaled:
            kube.scale_to_zero(namespace, name)
            job.scaled.add(name)
    for kind, name in decision.delete_children:
        log.info("%s: deleting %s %s: it left the spec", namespace, kind, name)
        kube.delete_child(kind, namespace, name)


async def label_pods(kube: Kube, job: JobState, namespace: str, decision: Decision) -> None:
    """Each pod's own Kubeflow labels (`kubeflow.pod_label_patches`), once per pod."""
    for name, uid, labels in decision.label_pods:
        if uid not in job.labelled:
            await asyncio.to_thread(kube.label_pod, namespace, name, uid, labels)
            job.labelled.add(uid)
    # Kept while the index still shows a pod without them (its event is on the way).
    job.labelled &= {uid for _, uid, _ in decision.label_pods}


async def restart_pods(kube: Kube, job: JobState, namespace: str, decision: Decision) -> None:
    """Delete the pods of a restart (`lifecycle.restart`), or those stopped with a parameter
    server (`lifecycle.together`), all at once: each gets SIGTERM at the same moment."""
    job.restarted = await _delete_pods(
        kube, namespace, decision.restart_pods, job.restarted, "stopping {n} pods together: {names}"
    )


async def release_pods(
    kube: Kube, released: set[str], namespace: str, pods: list[tuple[str, str]]
) -> set[str]:
    """Let go of the pods (name, uid) the operator's finalizer no longer holds
    (`lifecycle.ended`), each once while the watch may still show it held; the uids asked."""
    new = [(name, uid) for name, uid in pods if uid not in released]
    if new:
        log.info("%s: letting go of %d pods: %s", namespace, len(new), " ".join(n for n, _ in new))
        await asyncio.gather(
            *(asyncio.to_thread(kube.release_pod, namespace, name, uid) for name, uid in new)
        )
    return {uid for _, uid in pods}


async def end_done_pods(kube: Kube, job: JobState, namespace: str, decision: Decision) -> None:
    """Delete the pods of a finished job whose task is done, with the short grace period of
    `limits.done_pods`."""
    job.ended = await _delete_pods(
        kube,
        namespace,
        decision.done_pods,
        job.ended,
        "ending {n} pods whose task is done: {names}",
        DONE_GRACE_SECONDS,
    )


async def _delete_pods(
    kube: Kube,
    namespace: str,
    pods: list[tuple[str, str]],
    asked: set[str],
    what: str,
    grace: int | None = None,
) -> set[str]:
    """Delete `pods` (name, uid) together, but for those `asked` before (by uid), which the
    watch may not show deleted yet; the uids asked for now. `what` is the log line, with {n}
    and {names}."""
    new = [(name, uid) for name, uid in pods if uid not in asked]
    if new:
        names = " ".join(name for name, _ in new)
        log.info("%s: %s", namespace, what.format(n=len(new), names=names))
        await asyncio.gather(
            *(asyncio.to_thread(kube.delete_pod, namespace, name, uid, grace) for name, uid in new)
        )
    return {uid for _, uid in pods}


def counts_wait(job: JobState, decision: Decision, clock: Callable[[], float]) -> float | None:
    """Seconds a patch of pod counts alone may still wait; None when it is written now."""
    if not st.counts_only(decision.patch):
        job.counts_due = None
        return None
    now = clock()
    if job.counts_due is None:
        job.counts_due = now + COUNTS_DELAY_SECONDS
    if now >= job.counts_due:
        job.counts_due = None
        return None
    return job.counts_due - now


async def write_status(
    kube: Kube,
    job: JobState,
    key: JobKey,
    body: dict[str, Any],
    decision: Decision,
    first: ChildrenFirst | None = None,
) -> None:
    """The events the status patch announces, then the patch and the job metrics it moves;
    after the children being applied (`first`). Events first: a patch that fails, or whose
    answer is lost, is made again with its events, so each is posted at least once."""
    if first is not None and (decision.patch or decision.events):
        await first.wait()
    post_events(kube, key, body, decision.events)
    if decision.patch:
        try:
            result = await asyncio.to_thread(kube.patch_status, key[0], key[1], decision.patch)
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return  # deleted meanwhile
            raise
        # The index may still show any object our earlier writes replaced: all of them are
        # older than this result.
        earlier = job.written
        superseded: frozenset[str] = frozenset()
        if earlier is not None and earlier.result is body:
            superseded = earlier.superseded
        rv = body["metadata"].get("resourceVersion", "")
        job.written = Written(superseded | {rv}, job_record(result))
        metrics.STATUS_WRITES.inc()
        metrics.record(key[0], body.get("status") or {}, decision.status)
    job.written_state = st.state(decision.status)


def post_events(
    kube: Kube, key: JobKey, body: dict[str, Any], events: list[tuple[str, str, str]]
) -> None:
    """Post the job's Events, as the leader only."""
    if events and not kube.may_write():
        raise NotLeader("the leader Lease ran out before the events were posted")
    for type_, reason, message in events:
        # kopf reads only the identity of what it is given; a plain dict serves.
        kopf.event(body, type=type_, reason=reason, message=message)  # type: ignore[arg-type]
        metrics.TRANSITIONS.labels(reason).inc()
        log.info("%s/%s: %s: %s", key[0], key[1], reason, message)
