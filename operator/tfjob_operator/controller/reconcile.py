"""One reconcile of one TFJob: read from kopf's indexes, decide (pure), then apply.

This is the only place that turns a `Decision` into API calls, in their order (the calls
themselves: `apply.py`; the job's Kueue Workload: `workloads.py`; what is remembered of each job
between reconciles: `jobstate.py`; the FailedCreate checks: `failedcreates.py`). It is safe to
run twice, after a crash or a conflict: children are server-side applied, the status is a merge
patch computed against the stored status, and the decision itself depends only on what is
observed.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import kubernetes
import urllib3

from tfjob_operator.api.spec import MULTIKUEUE
from tfjob_operator.controller import metrics
from tfjob_operator.controller.apply import (
    ChildrenFirst,
    apply_children,
    converge,
    counts_wait,
    end_done_pods,
    label_pods,
    post_events,
    release_pods,
    restart_pods,
    write_status,
)
from tfjob_operator.controller.client import InTheWay, Kube, MissingAPI, NotLeader
from tfjob_operator.controller.failedcreates import FailedCreates
from tfjob_operator.controller.jobstate import Failing, JobKey, JobState
from tfjob_operator.controller.projections import unpacked
from tfjob_operator.controller.workloads import Workloads, seen
from tfjob_operator.controller.workqueue import RetryableError
from tfjob_operator.rules import handover, lineage
from tfjob_operator.rules import status as st
from tfjob_operator.rules.children import build
from tfjob_operator.rules.gang import Gang
from tfjob_operator.rules.kueue import multikueue
from tfjob_operator.rules.kueue.queue import Queueing, QueueView, queue_label_patch, queue_name
from tfjob_operator.rules.lifecycle import Decision, JobView, decide
from tfjob_operator.rules.lifecycle.ended import held, releases
from tfjob_operator.rules.lifecycle.suspension import dispatched_workload
from tfjob_operator.rules.offline_edits import edited_meanwhile
from tfjob_operator.rules.pods import PodObservation, observe
from tfjob_operator.rules.statefulsets import StatefulSetObservation

log = logging.getLogger(__name__)

# A failure that lasts this many attempts, or this long, goes into the job's status.
PERSISTENT_ATTEMPTS = 5
PERSISTENT_SECONDS = 30.0
# How soon to look again while an earlier job's StatefulSets of the same names are there.
EARLIER_WAIT_SECONDS = 5.0
# Server errors that no retry can heal: the spec makes something Kubernetes will not take.
TERMINAL_STATUSES = {400, 413, 422}
TERMINAL_MESSAGES = ("failed to create typed patch object", "request is too large")
# A child of that name is controlled by another owner: an earlier TFJob of the same name, whose
# children the garbage collector has yet to delete (`lineage`). Retried, with its backoff.
EARLIER_OWNER = "Only one reference can have Controller set to true"
# Failures of the API or the network, whose message says it all: no traceback in the log.
RETRYABLE = (kubernetes.client.ApiException, urllib3.exceptions.HTTPError, OSError)


def is_terminal(e: kubernetes.client.ApiException) -> bool:
    """A refusal that only a spec change can heal (a 4xx, a typed-patch 500, too large), but
    for a child of an earlier TFJob of the same name, which the garbage collector deletes."""
    message = _api_message(e)
    if EARLIER_OWNER in message:
        return False
    return e.status in TERMINAL_STATUSES or any(m in message for m in TERMINAL_MESSAGES)


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
    # Kueue (--kueue): None when the queue label is not read.
    queueing: Queueing | None = None
    # Whether the API server keeps container restart rules (found at start): a task that
    # ended stays ended (`rules/lifecycle/ended.py`).
    restart_rules: bool = False
    # Across jobs: the FailedCreate lists (one per namespace, shared), and what is read of
    # Kueue (the Workload API version, ResourceFlavors, priority classes).
    failed_creates: FailedCreates = field(init=False)
    workloads: Workloads = field(init=False)
    # After a start or a take-over: the jobs not yet looked at, and since when.
    _first_pass: tuple[set[JobKey], float, int] | None = None
    # Status writes wait for the children being applied.
    children_first: ChildrenFirst = field(init=False, default_factory=ChildrenFirst)

    def __post_init__(self) -> None:
        self.failed_creates = FailedCreates(self.kube, self.clock)
        self.workloads = Workloads(self.kube, self.clock, self.queueing)

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

    def caught_up(self, key: JobKey, resource_version: str | None) -> bool:
        """Whether this version of the job, which the index holds now, is our last status
        write's; if so, our copy of that write goes (the index is no longer behind it)."""
        if not self.wrote(key, resource_version):
            return False
        self.state[key].written = None
        return True

    def forget_children(self, key: JobKey) -> None:
        """A child was deleted behind our back: apply everything again next time."""
        job = self.state.get(key)
        if job is not None:
            job.applied = None
            job.forgotten += 1

    def pod_deleted(self, key: JobKey, body: dict[str, Any]) -> None:
        """Keep the last state of a deleted pod that ended in a stop on request, for the next
        reconcile: the watch may fold its exit into the deletion, which leaves no trace."""
        pod = observe(body)
        if pod is not None and any(e.stopped for e in pod.known_exits()):
            self._job(key).departed[pod.uid] = pod

    def workload_seen(self, key: JobKey, body: dict[str, Any], deleted: bool) -> bool:
        """Keep what a Workload event says; True when it is news for its job."""
        return seen(self._job(key).workloads, body, deleted)

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
        body = unpacked(bodies[0])
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
        view = JobView.from_body(body, self.cluster_domain, self.gang, self.restart_rules)
        job.view = (stamp, view.without_built())
        return view

    def _decide(
        self,
        view: JobView,
        observed: list[PodObservation],
        sets: list[StatefulSetObservation],
        now: datetime,
        queue: QueueView | None,
        *,
        create_failures: Mapping[str, str] | None = None,
        error: str | None = None,
        departed: Collection[PodObservation] = (),
        applied: Mapping[str, int] | None = None,
    ) -> Decision:
        """The one place a reconcile decides: what is seen of the job, with the operator's
        cluster domain and gang scheduler."""
        return decide(
            view,
            observed,
            now,
            self.cluster_domain,
            statefulsets=sets,
            create_failures=create_failures,
            error=error,
            gang=self.gang,
            queue=queue,
            departed=departed,
            applied=applied,
            restart_rules=self.restart_rules,
        )

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
            except (MissingAPI, InTheWay) as e:
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
            job.failing = Failing(since=now)
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
        children = self._children(key, body)
        decision = self._decide(
            self._view(key, body),
            children.pods,
            children.sets,
            datetime.now(UTC),
            self._job(key).queue,
            error=message[:500],
            applied=self._job(key).generations,
        )
        try:
            await write_status(self.kube, self._job(key), key, body, decision)
            failing.reported = True
        except Exception as e:
            log.warning("%s/%s: cannot report the reconcile error in status: %s", *key, e)

    def _children(
        self, key: JobKey, body: dict[str, Any]
    ) -> lineage.Lineage[StatefulSetObservation, PodObservation]:
        """The StatefulSets and pods seen under the job's name that are this job's."""
        return lineage.own(
            body["metadata"].get("uid", ""),
            list(self.statefulsets.get(key, [])),
            list(self.pods.get(key, [])),
        )

    def _departed(self, key: JobKey, body: dict[str, Any], job: JobState) -> list[PodObservation]:
        """The deleted pods remembered for the job that were its own (`lineage`): those of an
        earlier TFJob of its name, which the garbage collector deletes as it starts, are
        forgotten."""
        sets = list(self.statefulsets.get(key, []))
        kept = lineage.own(body["metadata"].get("uid", ""), sets, list(job.departed.values()))
        for uid in job.departed.keys() - {p.uid for p in kept.pods}:
            del job.departed[uid]
        return kept.pods

    async def _reconcile(self, key: JobKey) -> float | None:
        body = self._current_body(key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            await self.let_go(key, gone=True)
            return None
        if await self._default_managed_by(key, body):
            return None  # its update wakes the job again
        if multikueue.dispatched(body.get("spec")):
            view = self._view(key, body)
            if view.spec is not None:
                return await self._dispatched(key, body, view)
        if await self._run_elsewhere(key, body):
            return None
        children = self._children(key, body)
        # An earlier job's of this name, which the garbage collector is deleting.
        own = {p.uid for p in children.pods}
        await self._let_go(key, [p for p in self.pods.get(key, []) if p.uid not in own])
        if children.earlier_sets:
            # Said in the job's status once it lasts: the garbage collector deletes an earlier
            # job's children in seconds, but never those orphaned on purpose.
            message = (
                f"StatefulSet {', '.join(children.earlier_sets)} is not this TFJob's (an earlier "
                "TFJob of this name's, being deleted, or orphaned: then delete it)"
            )
            log.info("%s/%s: waiting: %s", *key, message)
            await self._persisting(key, message)
            return EARLIER_WAIT_SECONDS  # its deletion wakes the job too
        observed, sets = children.pods, children.sets
        view, now = self._view(key, body), datetime.now(UTC)
        job = self._job(key)
        departed = self._departed(key, body, job)
        await self._kueue_ownership(key, body, job, sets, observed)
        queue = await self.workloads.queue_view(job, key, body, view)
        failures, recheck = await self.failed_creates.check(job, key, view, observed, sets)
        decision = self._decide(
            view,
            observed,
            sets,
            now,
            queue,
            create_failures=failures,
            departed=departed,
            applied=job.generations,
        )

        def refused(problem: str) -> Decision:
            # The decision again, for a spec Kubernetes refused a child of.
            return self._decide(
                view.refused(problem), observed, sets, now, queue, departed=departed
            )

        # A new job: nothing applied yet, no StatefulSet seen, no condition written.
        fresh = job.applied is None and not sets and not view.status.get("conditions")
        decision = await self._apply_children(job, decision, refused, fresh, sets)
        await label_pods(self.kube, job, key[0], decision)

        # The decision is stored before anything is acted on that cannot be undone: a job's
        # end before its pods go (their exits are what decided it), a stop before its pods
        # are deleted. A failed write or a crash in between repeats the acts, from the
        # stored status, never the training.
        counts_delay = counts_wait(job, decision, self.clock)
        if counts_delay is None:
            await write_status(self.kube, job, key, body, decision, self.children_first)
        # Their news is written now (a patch of counts alone, which may wait, holds none).
        for said in departed:
            job.departed.pop(said.uid, None)
        # Before the scale-down: a kubelet keeps the grace period of the first deletion it
        # acts on, and the StatefulSet's gives the pod its whole one.
        await end_done_pods(self.kube, job, key[0], decision)
        if decision.scale_down or decision.delete_children:
            await asyncio.to_thread(converge, self.kube, job, key[0], decision)
        job.scaled &= set(decision.scale_down)  # shown scaled down: asked again if wanted
        # After the status write that counts their restarts: a crash in between deletes them at
        # the next reconcile, and counts nothing twice.
        for pod, uid in decision.delete_pods:
            log.info("%s/%s: deleting pod %s: its node stopped answering", *key, pod)
            await asyncio.to_thread(self.kube.force_delete_pod, key[0], pod, uid)
        # After the status write that records why they stop (`status.lastStop`).
        await restart_pods(self.kube, job, key[0], decision)
        # After the scale-down that ends a finished job's StatefulSets: a pod held because its
        # task ended goes only once its StatefulSet would not make it again.
        job.released = await release_pods(self.kube, job.released, key[0], decision.release_pods)
        conflict = None
        if decision.workload is not None and queue is not None:
            conflict = await self.workloads.apply(job, key, queue.version, decision.workload)
        elif queue is None and job.workloads:
            await self.workloads.drop(job, key)
        job.failing = None

        if decision.delete_job:
            log.info("%s/%s: ttlSecondsAfterFinished passed; deleting", *key)
            await asyncio.to_thread(self.kube.delete_job, *key)
            return None
        delays = [
            d for d in (decision.requeue_after, recheck, counts_delay, conflict) if d is not None
        ]
        if not delays and st.is_finished(decision.status):
            # A finished job that waits for nothing is kept as its record in the index and
            # what was written; its spec is parsed again if it is ever read again.
            job.view = None
        return min(delays) if delays else None

    async def let_go(self, key: JobKey, gone: bool = False) -> None:
        """Let go of the pods of a job not known (`gone`: deleted, or being deleted) that our
        finalizer holds, unless their StatefulSet, as it stands, would make them again
        (`ended.releases`, any exit taken as final: the spec is not read). A gone job's
        StatefulSets go with it: those that hold a pod are scaled to 0 first, so that none
        makes a pod again once it is let go, and the garbage collector is not waited for."""
        # Only the pods our own finalizer holds: those of the other API group's operator,
        # and their StatefulSets, are its own.
        pods = [p for p in self.pods.get(key, []) if p.finalized == self.kube.group]
        if gone and any(p.deleting for p in pods) and self.kube.may_write():
            sets = list(self.statefulsets.get(key, []))
            holding = {p.owner for p in pods if held(p, sets, {})}
            for s in sets:
                if s.uid in holding:
                    await asyncio.to_thread(self.kube.scale_to_zero, key[0], s.name)
            scaled = [replace(s, replicas=0) if s.uid in holding else s for s in sets]
            await self._let_go(key, pods, scaled)
            return
        await self._let_go(key, pods)

    async def _let_go(
        self,
        key: JobKey,
        pods: list[PodObservation],
        sets: list[StatefulSetObservation] | None = None,
    ) -> None:
        mine = self.kube.group
        if not any(p.finalized == mine and p.deleting for p in pods) or not self.kube.may_write():
            return
        if sets is None:
            sets = list(self.statefulsets.get(key, []))
        gone = releases(pods, sets, {}, self.kube.group)
        state = self.state.get(key)
        asked = state.earlier_released if state is not None else set()
        done = await release_pods(self.kube, asked, key[0], gone)
        if state is not None:
            state.earlier_released = done

    async def _apply_children(
        self,
        job: JobState,
        decision: Decision,
        refused: Callable[[str], Decision],
        fresh: bool,
        seen: Collection[StatefulSetObservation],
    ) -> Decision:
        """Apply the decision's children unless they are the ones last applied; the decision
        that stands after (`refused`'s, for children Kubernetes will never take). A `fresh`
        job's are created. The StatefulSets `seen` tell which ones changed since the last apply
        of an earlier process."""
        fingerprint = hashlib.blake2b(
            json.dumps(decision.children, sort_keys=True).encode(), digest_size=16
        ).digest()
        if job.applied == fingerprint:
            return decision
        forgotten = job.forgotten
        # Other children than this process applied before; else the first apply after a
        # start (or after a child was deleted), most likely the same children again, but for
        # StatefulSets of a job edited meanwhile.
        changed = (
            {(c["kind"], c["metadata"]["name"]) for c in decision.children}
            if job.applied is not None
            else edited_meanwhile(decision.children, seen)
        )
        # Children this process has not applied yet, but for the StatefulSets seen as the
        # job's: whose they are is looked at before they are applied over.
        ours = {("StatefulSet", s.name) for s in seen}
        check = (
            {(c["kind"], c["metadata"]["name"]) for c in decision.children} - ours
            if job.applied is None
            else set()
        )
        try:
            with self.children_first.applying():
                job.generations = await asyncio.to_thread(
                    apply_children, self.kube, decision.children, fresh, changed, check
                )
        except kubernetes.client.ApiException as e:
            if not is_terminal(e):
                raise
            # Kubernetes refuses what the spec makes (a port out of range, a field its
            # version does not know, an object too large): the spec is invalid, and sending
            # the same children again would be refused again.
            decision = refused(f"Kubernetes refused a child: {_api_message(e)}")
        if job.forgotten == forgotten:
            job.applied = fingerprint
        return decision

    async def _kueue_ownership(
        self,
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
        patch = queue_label_patch(body["metadata"].get("labels") or {}, self.queueing)
        if patch and not job.queue_labelled:
            log.info("%s/%s: labelling it for LocalQueue default (--kueue-manage-all)", *key)
            await asyncio.to_thread(self.kube.patch_job, *key, patch)
            job.queue_labelled = True
        if not job.kueue_warned:
            event = handover.kueue_took_over(f"{key[0]}/{key[1]}", self.kube.group, sets, pods)
            if event is not None:
                post_events(self.kube, key, body, [event])
                job.kueue_warned = True

    async def _default_managed_by(self, key: JobKey, body: dict[str, Any]) -> bool:
        """`spec.managedBy` set to MultiKueue, as Kueue's webhook sets it for its own kinds, on
        a job not yet started whose LocalQueue leads to a MultiKueue admission check
        (`--kueue`); asked once a job. True when it was set now."""
        job, meta = self._job(key), body["metadata"]
        if self.queueing is None or job.multikueue_checked:
            return False
        queue = queue_name(meta.get("labels") or {}, self.queueing)
        if queue is None or not multikueue.may_default(body):
            job.multikueue_checked = True
            return False
        checks = await self.workloads.multikueue_checks(key[0], queue)
        job.multikueue_checked = True
        if not multikueue.defaults_to_multikueue(body, checks):
            return False
        log.info("%s/%s: LocalQueue %s dispatches with MultiKueue: spec.managedBy set", *key, queue)
        try:
            await asyncio.to_thread(self.kube.patch_job, *key, {"spec": {"managedBy": MULTIKUEUE}})
        except kubernetes.client.ApiException as e:
            if e.status != 422:  # started meanwhile: it runs here
                raise
            log.info("%s/%s: not set: %s", *key, _api_message(e))
            return False
        return True

    async def _dispatched(self, key: JobKey, body: dict[str, Any], view: JobView) -> float | None:
        """A job MultiKueue runs on a worker cluster: its Workload only, and one Event (no
        child, no status: Kueue copies the worker's into it)."""
        job, name = self._job(key), f"{key[0]}/{key[1]}"
        assert view.spec is not None
        if job.managed_by != MULTIKUEUE:
            post_events(self.kube, key, body, [multikueue.dispatched_event(name)])
            job.managed_by = MULTIKUEUE
        queue = await self.workloads.queue_view(job, key, body, view)
        if queue is None:
            if not job.kueue_warned:
                post_events(self.kube, key, body, [multikueue.no_queue_event(name)])
                job.kueue_warned = True
            return None
        # As the view's spec check rendered them (its `built`, kept only on a new generation):
        # the same gang, so that the Workload's podSets do not change between reconciles.
        built = view.built or build(
            view.ref, view.spec, self.cluster_domain, self.gang, self.restart_rules
        )
        decision = dispatched_workload(built, queue, view.status, view.spec.run_policy.suspend)
        return await self.workloads.apply(job, key, queue.version, decision)

    async def _run_elsewhere(self, key: JobKey, body: dict[str, Any]) -> bool:
        """Whether another controller runs the job (`handover`): then nothing of ours is
        made, and the user is told once."""
        job, name = self._job(key), f"{key[0]}/{key[1]}"
        manager = handover.managed_elsewhere(body.get("spec"))
        if manager is not None:
            if job.managed_by != manager:
                log.info("%s: runPolicy.managedBy is %s; leaving it alone", name, manager)
                events = [handover.managed_elsewhere_event(name, manager)]
                post_events(self.kube, key, body, events)
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
        await write_status(self.kube, job, key, body, decision)
        return True


def _namespace_going(e: kubernetes.client.ApiException) -> bool:
    return e.status == 403 and "being terminated" in _api_message(e)


def _api_message(e: kubernetes.client.ApiException) -> str:
    try:
        return json.loads(e.body or "{}").get("message") or str(e.reason)
    except (ValueError, AttributeError):
        return str(e.body or e.reason)
