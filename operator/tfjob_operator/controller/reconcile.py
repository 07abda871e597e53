"""One reconcile of one TFJob: read from kopf's indexes, decide (pure), then apply.

This is the only place that turns a `Decision` into API calls. It is safe to run twice, after a
crash or a conflict: children are server-side applied, the status is a merge patch computed
against the stored status, and the decision itself depends only on what is observed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
import kubernetes
import urllib3

from tfjob_operator.controller import metrics
from tfjob_operator.controller.client import Kube, MissingAPI, NotLeader
from tfjob_operator.controller.projections import job_record
from tfjob_operator.controller.workqueue import RetryableError
from tfjob_operator.rules import handover, kueue
from tfjob_operator.rules import status as st
from tfjob_operator.rules.gang import Gang
from tfjob_operator.rules.lifecycle import Decision, JobView, decide
from tfjob_operator.rules.pods import PodObservation
from tfjob_operator.rules.statefulsets import StatefulSetObservation, lacking

log = logging.getLogger(__name__)

JobKey = tuple[str, str]  # (namespace, name)

# A failure that lasts this many attempts, or this long, goes into the job's status.
PERSISTENT_ATTEMPTS = 5
PERSISTENT_SECONDS = 30.0
# A StatefulSet that still lacks pods after the grace period is looked at for FailedCreate
# events, and again this often while it lacks them.
CREATE_GRACE_SECONDS = 10.0
CREATE_CHECK_SECONDS = 10.0
# One list of a namespace's FailedCreate events serves every job there that looks within this
# many seconds: 1000 jobs waiting on a slow controller cost one list, not 1000.
FAILED_CREATE_SHARED_SECONDS = 2.0
# A status write that changes only pod counts waits this long, so that the pods of a job that
# come up (or go away) together cost one write.
COUNTS_DELAY_SECONDS = 1.0
# A ResourceFlavor or priority class read is used this long before it is read again.
CLUSTER_READ_SECONDS = 60.0
# A Workload status write refused for a newer Workload (Kueue wrote meanwhile) is redone after.
WORKLOAD_CONFLICT_SECONDS = 0.5
# Server errors that no retry can heal: the spec makes something Kubernetes will not take.
TERMINAL_STATUSES = {400, 413, 422}
TERMINAL_MESSAGES = ("failed to create typed patch object", "request is too large")
# Failures of the API or the network, whose message says it all: no traceback in the log.
RETRYABLE = (kubernetes.client.ApiException, urllib3.exceptions.HTTPError, OSError)


def is_terminal(e: kubernetes.client.ApiException) -> bool:
    """A refusal that only a spec change can heal (a 4xx, a typed-patch 500, too large)."""
    message = _api_message(e)
    return e.status in TERMINAL_STATUSES or any(m in message for m in TERMINAL_MESSAGES)


@dataclass
class _Failing:
    """A job whose reconciles keep failing: since when, how often, and whether it is said."""

    since: float
    attempts: int = 0
    reported: bool = False


@dataclass(frozen=True)
class _Written:
    """Our last status write of a job: the object it produced, and the resourceVersions it
    supersedes (the index may still show any of them until the watch delivers our write)."""

    superseded: frozenset[str]
    result: dict[str, Any]


@dataclass(frozen=True)
class _CreateCheck:
    """A job whose StatefulSets lack pods: since when, their FailedCreate messages as last
    looked at, and when that was (None: not yet)."""

    since: float
    failures: dict[str, str]
    checked_at: float | None = None


@dataclass
class JobState:
    """What the reconciler remembers of one job between its reconciles. All of it goes at
    once, when the job leaves the index (`Reconciler.state`)."""

    # A digest of the children last applied, so unchanged children are not re-sent on every
    # pod event (the digest, not the children's JSON: kilobytes a job).
    applied: bytes | None = None
    # Bumped by `forget_children`: an apply under way when a child goes records no digest, since
    # what it applied may predate the deletion.
    forgotten: int = 0
    written: _Written | None = None
    # The parsed spec, and the (uid, generation, name) it was read from (parsing is not free).
    view: tuple[tuple[Any, ...], JobView] | None = None
    # When a status write that changes pod counts alone is due at the latest (`clock` time).
    counts_due: float | None = None
    failing: _Failing | None = None
    create_check: _CreateCheck | None = None
    # The job's state (Created, Running, ...) as last written, for the jobs-by-state gauge.
    written_state: str | None = None
    # Pods (by uid) whose own Kubeflow labels were patched in: each once.
    labelled: set[str] = field(default_factory=set)
    # The other controller runPolicy.managedBy names, once its Event is posted ("": none).
    managed_by: str = ""
    # The job's Kueue Workloads as last seen, by name (`kueue.observe_workload`), and the
    # job's place in Kueue as last decided on.
    workloads: dict[str, kueue.WorkloadObservation] = field(default_factory=dict)
    queue: kueue.QueueView | None = None


@dataclass(frozen=True)
class _SharedList:
    """One list of a namespace's FailedCreate events, by StatefulSet (name, uid): it serves
    every job there that looks within FAILED_CREATE_SHARED_SECONDS of `started`."""

    started: float
    messages: asyncio.Future[dict[tuple[str, str], str]]


@dataclass
class Reconciler:
    """Reconciles jobs, one reconcile of a job at a time (the work queue sees to that). What it
    remembers of a job between reconciles saves calls, writes and parsing, and paces them: a
    replica that starts without any of it decides the same."""

    kube: Kube
    cluster_domain: str
    gang: Gang | None = None
    # kopf's indexes (`handlers.py`): key -> [job record], [pod], [StatefulSet].
    jobs: Mapping[JobKey, Collection[dict[str, Any]]] = field(default_factory=dict)
    pods: Mapping[JobKey, Collection[PodObservation]] = field(default_factory=dict)
    statefulsets: Mapping[JobKey, Collection[StatefulSetObservation]] = field(default_factory=dict)
    # Seconds that only ever go forward: when a count write is due, how long a job failed, ...
    clock: Callable[[], float] = time.monotonic
    # Per job, everything remembered between reconciles: forgetting a job is one pop.
    state: dict[JobKey, JobState] = field(default_factory=dict)
    # Across the jobs of a namespace: its latest FailedCreate list, by namespace.
    failed_create_lists: dict[str, _SharedList] = field(default_factory=dict)
    # Kueue (--kueue): None when the queue label is not read.
    queueing: kueue.Queueing | None = None
    # Cluster-scoped reads (ResourceFlavors, priority classes): (group, plural, name) ->
    # (when read, the object or None).
    cluster_reads: dict[tuple[str, str, str], tuple[float, Any]] = field(default_factory=dict)
    kueue_version: str | None = None
    # After a start or a take-over: the jobs not yet looked at, and since when.
    _first_pass: tuple[set[JobKey], float, int] | None = None

    def start_first_pass(self) -> None:
        """Count the jobs known now until each has been reconciled once, then say how long
        that took (`first_pass_done`)."""
        known = set(self.jobs)
        self._first_pass = (known, self.clock(), len(known))
        if not known:
            self._first_pass = None
            metrics.FIRST_PASS_SECONDS.set(0.0)

    def _looked_at(self, key: JobKey) -> None:
        if self._first_pass is None:
            return
        left, since, known = self._first_pass
        left.discard(key)
        if not left:
            self._first_pass = None
            seconds = self.clock() - since
            metrics.FIRST_PASS_SECONDS.set(seconds)
            log.info(
                "first pass: all %d TFJobs known at the start looked at in %.2fs", known, seconds
            )

    def states(self) -> list[tuple[str, str]]:
        """(namespace, state) of every job this replica reconciles (read at scrape time, from
        another thread: one C-level copy of the dict)."""
        return [
            (key[0], job.written_state)
            for key, job in list(self.state.items())
            if job.written_state is not None
        ]

    def wrote(self, key: JobKey, resource_version: str | None) -> bool:
        """Whether this version of the job is the one our last status write produced."""
        job = self.state.get(key)
        written = job.written if job is not None else None
        return (
            written is not None
            and resource_version is not None
            and written.result["metadata"].get("resourceVersion") == resource_version
        )

    def forget_children(self, key: JobKey) -> None:
        """A child was deleted behind our back: apply everything again next time."""
        job = self.state.get(key)
        if job is not None:
            job.applied = None
            job.forgotten += 1

    def workload_seen(self, key: JobKey, body: dict[str, Any], deleted: bool) -> bool:
        """Keep what a Workload event says; True when it is news for its job."""
        name = (body.get("metadata") or {}).get("name", "")
        workloads = self._job(key).workloads
        if deleted:
            return workloads.pop(name, None) is not None
        seen = kueue.observe_workload(body)
        if workloads.get(name) == seen:
            return False
        workloads[name] = seen
        return True

    def _job(self, key: JobKey) -> JobState:
        """The job's state, made empty on first use."""
        return self.state.setdefault(key, JobState())

    def _current_body(self, key: JobKey) -> dict[str, Any] | None:
        """The job as it stands: our last write while the index still shows an object that
        write replaced, else the index's. A job gone from the index is forgotten."""
        bodies = list(self.jobs.get(key, []))
        if not bodies:
            self.state.pop(key, None)
            return None
        body = bodies[0]
        job = self.state.get(key)
        if job is not None and job.written is not None:
            if body["metadata"].get("resourceVersion") in job.written.superseded:
                return job.written.result
            job.written = None
        return body

    def _view(self, key: JobKey, body: dict[str, Any]) -> JobView:
        """The job's view; the spec is parsed again only when its generation changes. The pod
        templates its check renders serve this reconcile's decision; they are not kept."""
        meta = body["metadata"]
        stamp = (meta.get("uid"), meta.get("generation"), meta.get("name"))
        job = self._job(key)
        if job.view is not None and job.view[0] == stamp and meta.get("generation") is not None:
            return job.view[1].with_status(dict(body.get("status") or {}))
        view = JobView.from_body(body, self.cluster_domain, self.gang)
        job.view = (stamp, view.without_built())
        return view

    async def __call__(self, key: JobKey) -> float | None:
        if not self.kube.may_write():
            return None  # a standby, or a leader whose Lease has run out: not ours to touch
        try:
            return await self._timed(key)
        finally:
            self._looked_at(key)

    async def _timed(self, key: JobKey) -> float | None:
        with metrics.RECONCILE_SECONDS.time():
            try:
                delay = await self._reconcile(key)
            except NotLeader:
                log.info("%s/%s: reconcile stopped: the leader Lease is not ours", *key)
                return None
            except MissingAPI as e:
                # Nothing to retry quickly, nothing to wait for: say it now, and look again.
                metrics.RECONCILES.labels("error").inc()
                await self._persisting(key, str(e), at_once=True)
                raise RetryableError(str(e)) from None
            except Exception as e:
                metrics.RECONCILES.labels("error").inc()
                message = (
                    f"{e.status} {e.reason}: {_api_message(e)}"
                    if isinstance(e, kubernetes.client.ApiException)
                    else f"{type(e).__name__}: {e}"
                )
                if isinstance(e, kubernetes.client.ApiException) and _namespace_going(e):
                    log.debug("%s/%s: namespace is being deleted; nothing to do", *key)
                    return None
                await self._persisting(key, message)
                if isinstance(e, RETRYABLE):
                    raise RetryableError(message) from None
                raise  # a bug of ours: logged with its traceback
        metrics.RECONCILES.labels("ok").inc()
        return delay

    async def _persisting(self, key: JobKey, message: str, *, at_once: bool = False) -> None:
        """Count a failed reconcile; once it persists (`at_once`: a setup error, which does
        from the start), say so in the job's status, once."""
        now = self.clock()
        job = self._job(key)
        if job.failing is None:
            job.failing = _Failing(since=now)
        failing = job.failing
        failing.attempts += 1
        lasting = (
            at_once
            or failing.attempts >= PERSISTENT_ATTEMPTS
            or now - failing.since >= PERSISTENT_SECONDS
        )
        if failing.reported or not lasting:
            return
        body = self._current_body(key)
        if body is None:
            return
        view = self._view(key, body)
        decision = decide(
            view,
            self.pods.get(key, []),
            datetime.now(UTC),
            self.cluster_domain,
            statefulsets=list(self.statefulsets.get(key, [])),
            error=message[:500],
            gang=self.gang,
            queue=self._job(key).queue,
        )
        try:
            await self._write(key, body, decision)
            failing.reported = True
        except Exception as e:
            log.warning("%s/%s: cannot report the reconcile error in status: %s", *key, e)

    async def _reconcile(self, key: JobKey) -> float | None:
        body = self._current_body(key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return None
        if await self._run_elsewhere(key, body):
            return None
        observed: list[PodObservation] = list(self.pods.get(key, []))
        sets: list[StatefulSetObservation] = list(self.statefulsets.get(key, []))
        view, now = self._view(key, body), datetime.now(UTC)
        queue = await self._queue_view(key, body, view)
        failures, recheck = await self._create_failures(key, view, observed, sets)
        decision = decide(
            view,
            observed,
            now,
            self.cluster_domain,
            statefulsets=sets,
            create_failures=failures,
            gang=self.gang,
            queue=queue,
        )

        fingerprint = hashlib.blake2b(
            json.dumps(decision.children, sort_keys=True).encode(), digest_size=16
        ).digest()
        job = self._job(key)
        if job.applied != fingerprint:
            forgotten = job.forgotten
            try:
                await asyncio.to_thread(self._apply_all, decision.children)
            except kubernetes.client.ApiException as e:
                if not is_terminal(e):
                    raise
                # Kubernetes refuses what the spec makes (a port out of range, a field its
                # version does not know, an object too large): the spec is invalid, and sending
                # the same children again would be refused again.
                problem = f"Kubernetes refused a child: {_api_message(e)}"
                decision = decide(
                    view.refused(problem),
                    observed,
                    now,
                    self.cluster_domain,
                    statefulsets=sets,
                    gang=self.gang,
                    queue=queue,
                )
            if job.forgotten == forgotten:
                job.applied = fingerprint
        if decision.scale_down or decision.delete_children:
            await asyncio.to_thread(self._converge, key[0], decision)
        await self._label_pods(key, decision)

        counts_wait = self._counts_wait(key, decision)
        if counts_wait is None:
            await self._write(key, body, decision)
        # After the status write that counts their restarts: a crash in between deletes them at
        # the next reconcile, and counts nothing twice.
        for pod, uid in decision.delete_pods:
            log.info("%s/%s: deleting pod %s: its node stopped answering", *key, pod)
            await asyncio.to_thread(self.kube.force_delete_pod, key[0], pod, uid)
        conflict = None
        if decision.workload is not None and queue is not None:
            conflict = await self._apply_workload(key, queue.version, decision.workload)
        elif queue is None and job.workloads:
            await self._drop_workloads(key)
        job.failing = None

        if decision.delete_job:
            log.info("%s/%s: ttlSecondsAfterFinished passed; deleting", *key)
            await asyncio.to_thread(self.kube.delete_job, *key)
            return None
        delays = [
            d for d in (decision.requeue_after, recheck, counts_wait, conflict) if d is not None
        ]
        return min(delays) if delays else None

    async def _queue_view(
        self, key: JobKey, body: dict[str, Any], view: JobView
    ) -> kueue.QueueView | None:
        """The job's place in Kueue, for a job that waits in a LocalQueue (`--kueue`): its
        Workload as last seen, the flavors it was admitted on, its priority."""
        meta = body["metadata"]
        name = kueue.queue_name(meta.get("labels") or {}, self.queueing)
        job = self._job(key)
        if name is None or view.spec is None:
            job.queue = None
            return None
        version = await self._kueue_version()
        if version is None:
            raise MissingAPI(
                f"the TFJob waits in LocalQueue {name} (label {kueue.QUEUE_LABEL}), but Kueue "
                f"is not installed: no {kueue.GROUP} Workload API on this cluster. Install "
                "Kueue, or remove the label to run the job without it"
            )
        workload = job.workloads.get(kueue.workload_name(key[1], meta.get("uid", "")))
        flavors = {}
        for flavor in sorted(workload.flavor_names()) if workload is not None else []:
            found = await self._cluster_read(kueue.GROUP, version, "resourceflavors", flavor)
            if found is None:
                raise MissingAPI(
                    f"Kueue admitted the job on ResourceFlavor {flavor}, which does not exist"
                )
            flavors[flavor] = kueue.Flavor.from_body(found)
        priority = None
        wanted = kueue.priority_class(meta.get("labels") or {}, view.spec)
        if wanted is not None:
            group, pc = wanted
            found = await self._cluster_read(group, *kueue.priority_class_api(group, version), pc)
            if found is None:
                raise MissingAPI(
                    f"the TFJob names priority class {pc} ({group}), which does not exist"
                )
            priority = kueue.Priority(group, pc, int(found.get("value", 0)))
        job.queue = kueue.QueueView(name, version, workload, flavors, priority)
        return job.queue

    async def _drop_workloads(self, key: JobKey) -> None:
        """A job that no longer waits in a queue (its label gone, its spec invalid) keeps no
        Workload, so that no quota stays reserved for it."""
        version = await self._kueue_version()
        if version is None:
            return
        for name in list(self._job(key).workloads):
            log.info("%s/%s: deleting Workload %s: the job waits in no queue", *key, name)
            await asyncio.to_thread(self.kube.delete_workload, version, key[0], name)

    async def _kueue_version(self) -> str | None:
        """The Workload API version served, asked once it is found; None without Kueue (asked
        again next time: Kueue may be installed meanwhile)."""
        if self.kueue_version is None:
            self.kueue_version = await asyncio.to_thread(self.kube.workload_version)
        return self.kueue_version

    async def _cluster_read(self, group: str, version: str, plural: str, name: str) -> Any:
        """A cluster-scoped object, read at most once a CLUSTER_READ_SECONDS; None if absent."""
        now = self.clock()
        cached = self.cluster_reads.get((group, plural, name))
        if cached is not None and now - cached[0] < CLUSTER_READ_SECONDS:
            return cached[1]
        found = await asyncio.to_thread(self.kube.get_cluster_object, group, version, plural, name)
        self.cluster_reads[(group, plural, name)] = (now, found)
        return found

    async def _apply_workload(
        self, key: JobKey, version: str, decision: kueue.WorkloadDecision
    ) -> float | None:
        """Replace, make or update the job's Workload; the seconds after which to try again
        when Kueue wrote it meanwhile."""
        namespace = key[0]
        if decision.delete is not None:
            log.info("%s/%s: replacing Workload %s: the job's spec changed", *key, decision.delete)
            await asyncio.to_thread(self.kube.delete_workload, version, namespace, decision.delete)
        if decision.create is not None:
            await asyncio.to_thread(self.kube.create_workload, decision.create)
        if decision.status_patch:
            name = self._job(key).queue.workload.name  # type: ignore[union-attr]
            try:
                await asyncio.to_thread(
                    self.kube.patch_workload_status, version, namespace, name, decision.status_patch
                )
            except kubernetes.client.ApiException as e:
                if e.status != 409:
                    raise
                return WORKLOAD_CONFLICT_SECONDS
        return None

    async def _run_elsewhere(self, key: JobKey, body: dict[str, Any]) -> bool:
        """Whether another controller runs the job (`handover`): then nothing of ours is
        made, and the user is told once."""
        job, name = self._job(key), f"{key[0]}/{key[1]}"
        manager = handover.managed_elsewhere(body.get("spec"))
        if manager is not None:
            if job.managed_by != manager:
                log.info("%s: runPolicy.managedBy is %s; leaving it alone", name, manager)
                self._post(key, body, [handover.managed_elsewhere_event(name, manager)])
                job.managed_by = manager
            return True
        job.managed_by = ""
        status = body.get("status")
        if not handover.may_be_started_elsewhere(status):
            return False
        uid = body["metadata"].get("uid", "")
        foreign = await asyncio.to_thread(self.kube.foreign_children, *key, uid)
        decision = handover.started_elsewhere(dict(status or {}), foreign, name, datetime.now(UTC))
        if decision is None:
            return False
        await self._write(key, body, decision)
        return True

    async def _label_pods(self, key: JobKey, decision: Decision) -> None:
        """Each pod's own Kubeflow labels (`kubeflow.pod_label_patches`), once per pod."""
        job = self._job(key)
        for name, uid, labels in decision.label_pods:
            if uid not in job.labelled:
                await asyncio.to_thread(self.kube.label_pod, key[0], name, uid, labels)
                job.labelled.add(uid)
        # Kept while the index still shows a pod without them (its event is on the way).
        job.labelled &= {uid for _, uid, _ in decision.label_pods}

    def _counts_wait(self, key: JobKey, decision: Decision) -> float | None:
        """Seconds a patch of pod counts alone may still wait; None when it is written now."""
        job = self._job(key)
        if not st.counts_only(decision.patch):
            job.counts_due = None
            return None
        now = self.clock()
        if job.counts_due is None:
            job.counts_due = now + COUNTS_DELAY_SECONDS
        if now >= job.counts_due:
            job.counts_due = None
            return None
        return job.counts_due - now

    async def _write(self, key: JobKey, body: dict[str, Any], decision: Decision) -> None:
        """The status patch, then the events it announces and the job metrics it moves."""
        if decision.patch:
            try:
                result = await asyncio.to_thread(
                    self.kube.patch_status, key[0], key[1], decision.patch
                )
            except kubernetes.client.ApiException as e:
                if e.status == 404:
                    return  # deleted meanwhile
                raise
            # The index may still show any object our earlier writes replaced: all of them are
            # older than this result.
            job = self._job(key)
            earlier = job.written
            superseded: frozenset[str] = frozenset()
            if earlier is not None and earlier.result is body:
                superseded = earlier.superseded
            rv = body["metadata"].get("resourceVersion", "")
            job.written = _Written(superseded | {rv}, job_record(result))
            metrics.STATUS_WRITES.inc()
            metrics.record(key[0], body.get("status") or {}, decision.status)
        self._job(key).written_state = st.state(decision.status)
        self._post(key, body, decision.events)

    def _post(self, key: JobKey, body: dict[str, Any], events: list[tuple[str, str, str]]) -> None:
        if events and not self.kube.may_write():
            raise NotLeader("the leader Lease ran out before the events were posted")
        for type_, reason, message in events:
            # kopf reads only the identity of what it is given; a plain dict serves.
            kopf.event(body, type=type_, reason=reason, message=message)  # type: ignore[arg-type]
            metrics.TRANSITIONS.labels(reason).inc()
            log.info("%s/%s: %s: %s", key[0], key[1], reason, message)

    async def _create_failures(
        self,
        key: JobKey,
        view: JobView,
        pods: list[PodObservation],
        sets: list[StatefulSetObservation],
    ) -> tuple[dict[str, str], float | None]:
        """FailedCreate messages of StatefulSets that lack pods, and when to look again.

        A StatefulSet lacks pods for a moment after it is made or scaled up; only one that
        still lacks them after a grace period is looked at, at most every few seconds per
        job: a healthy job costs no call.
        """
        job = self._job(key)
        short = lacking(key[1], sets, pods) if view.spec is not None else []
        if not short:
            job.create_check = None
            return {}, None
        now = self.clock()
        if job.create_check is None:
            job.create_check = _CreateCheck(since=now, failures={})
        check = job.create_check
        due = max(
            check.since + CREATE_GRACE_SECONDS, (check.checked_at or 0.0) + CREATE_CHECK_SECONDS
        )
        if now < due:
            return check.failures, due - now
        listed = await self._namespace_failed_creates(key[0])
        failures = {c.name: listed[(c.name, c.uid)] for c in short if (c.name, c.uid) in listed}
        job.create_check = _CreateCheck(check.since, failures, checked_at=now)
        return failures, CREATE_CHECK_SECONDS

    async def _namespace_failed_creates(self, namespace: str) -> dict[tuple[str, str], str]:
        """The namespace's FailedCreate messages by StatefulSet, from one list shared by every
        job of the namespace that looks within a moment (a list under way included)."""
        now = self.clock()
        shared = self.failed_create_lists.get(namespace)
        if shared is not None and now - shared.started < FAILED_CREATE_SHARED_SECONDS:
            future = shared.messages
            failed = future.done() and (future.cancelled() or future.exception() is not None)
            if not failed:
                return await asyncio.shield(future)
        task = asyncio.ensure_future(asyncio.to_thread(self.kube.failed_creates, namespace))
        self.failed_create_lists[namespace] = _SharedList(now, task)
        return await asyncio.shield(task)

    def _apply_all(self, children: list[dict[str, Any]]) -> None:
        for child in children:
            self.kube.apply(child)

    def _converge(self, namespace: str, decision: Decision) -> None:
        for name in decision.scale_down:
            self.kube.scale_to_zero(namespace, name)
        for kind, name in decision.delete_children:
            log.info("%s: deleting %s %s: it left the spec", namespace, kind, name)
            self.kube.delete_child(kind, namespace, name)


def _namespace_going(e: kubernetes.client.ApiException) -> bool:
    return e.status == 403 and "being terminated" in _api_message(e)


def _api_message(e: kubernetes.client.ApiException) -> str:
    try:
        return json.loads(e.body or "{}").get("message") or str(e.reason)
    except (ValueError, AttributeError):
        return str(e.body or e.reason)
