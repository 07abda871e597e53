"""One reconcile of one TFJob: read from kopf's indexes, decide (pure), then apply.

A pass reads the job, ends early when it is not ours to run now, decides once on what is seen,
then acts on the decision. This is the only place that turns a `Decision` into API calls, in
their order (the calls themselves: `apply.py`; who runs the job: `managers.py`; the job's Kueue
Workload: `workloads.py`; what is remembered of each job between reconciles: `jobstate.py`; the
FailedCreate checks: `failedcreates.py`; what the API server's refusals mean: `refusals.py`). It
is safe to run twice, after a crash or a conflict: children are server-side applied, the status
is a merge patch computed against the stored status, and the decision itself depends only on
what is observed.
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

from tfjob_operator.controller import metrics
from tfjob_operator.controller.apply import (
    ChildrenFirst,
    apply_children,
    converge,
    counts_wait,
    end_done_pods,
    label_pods,
    release_pods,
    restart_pods,
    write_status,
)
from tfjob_operator.controller.client import InTheWay, Kube, MissingAPI, NotLeader
from tfjob_operator.controller.failedcreates import FailedCreates
from tfjob_operator.controller.jobstate import Failing, JobKey, JobState
from tfjob_operator.controller.managers import (
    default_managed_by,
    keep_kueue_off,
    run_dispatched,
    run_elsewhere,
)
from tfjob_operator.controller.projections import unpacked
from tfjob_operator.controller.refusals import api_message, is_terminal, namespace_going
from tfjob_operator.controller.workloads import Workloads, seen
from tfjob_operator.controller.workqueue import RetryableError
from tfjob_operator.rules import lineage
from tfjob_operator.rules import status as st
from tfjob_operator.rules.children import Built, build
from tfjob_operator.rules.gang import Gang
from tfjob_operator.rules.kueue import multikueue
from tfjob_operator.rules.kueue.queue import Queueing, QueueView
from tfjob_operator.rules.lifecycle import Decision, JobView, decide
from tfjob_operator.rules.lifecycle.ended import held, releases
from tfjob_operator.rules.offline_edits import edited_meanwhile
from tfjob_operator.rules.pods import PodObservation, observe
from tfjob_operator.rules.statefulsets import StatefulSetObservation

log = logging.getLogger(__name__)

# A failure that lasts this many attempts, or this long, goes into the job's status.
PERSISTENT_ATTEMPTS = 5
PERSISTENT_SECONDS = 30.0
# How soon to look again while an earlier job's StatefulSets of the same names are there.
EARLIER_WAIT_SECONDS = 5.0
# Failures of the API or the network, whose message says it all: no traceback in the log.
RETRYABLE = (kubernetes.client.ApiException, urllib3.exceptions.HTTPError, OSError)


@dataclass(frozen=True)
class Observed:
    """What a decision is made on: the job as viewed, its own pods and StatefulSets, the time,
    its place in Kueue, and what is remembered or found out of it."""

    view: JobView
    pods: list[PodObservation]
    sets: list[StatefulSetObservation]
    now: datetime
    queue: QueueView | None
    departed: Collection[PodObservation] = ()
    create_failures: Mapping[str, str] | None = None
    applied: Mapping[str, int] | None = None
    error: str | None = None

    def refused(self, problem: str) -> Observed:
        """The same, for a spec Kubernetes refused a child of: an invalid spec, of which
        nothing stands applied and nothing fails to be created."""
        return replace(self, view=self.view.refused(problem), create_failures=None, applied=None)


@dataclass(frozen=True)
class Ended:
    """A reconcile that ends before its decision, and when to look again (None: on news)."""

    requeue: float | None = None


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

    def _built(self, view: JobView) -> Built:
        """The view's pod templates as its spec check rendered them (its `built`, kept only on
        a new generation), else rendered alike: the same gang, so that a Workload made of them
        does not change between reconciles."""
        assert view.spec is not None
        return view.built or build(
            view.ref, view.spec, self.cluster_domain, self.gang, self.restart_rules
        )

    def _decide(self, observed: Observed) -> Decision:
        """The one place a reconcile decides: on what was seen, with the operator's cluster
        domain, gang scheduler and restart rules."""
        return decide(
            observed.view,
            observed.pods,
            observed.now,
            self.cluster_domain,
            statefulsets=observed.sets,
            create_failures=observed.create_failures,
            error=observed.error,
            gang=self.gang,
            queue=observed.queue,
            departed=observed.departed,
            applied=observed.applied,
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
                    f"{e.status} {e.reason}: {api_message(e)}"
                    if isinstance(e, kubernetes.client.ApiException)
                    else f"{type(e).__name__}: {e}"
                )
                if isinstance(e, kubernetes.client.ApiException) and namespace_going(e):
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
        view, at = self._view(key, body), datetime.now(UTC)
        decision = self._decide(
            Observed(
                view,
                children.pods,
                children.sets,
                at,
                job.queue,
                applied=job.generations,
                error=message[:500],
            )
        )
        try:
            await write_status(self.kube, job, key, body, decision)
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
        """One pass over the job: read it, end early where it is not ours to run now, decide
        once on what is seen, then act on the decision in its order."""
        body = await self._read(key)
        if body is None:
            return None
        job = self._job(key)
        ended = await self._run_by_others(key, body, job)
        if ended is not None:
            return ended.requeue
        children = self._children(key, body)
        if await self._earlier_job_in_the_way(key, children):
            return EARLIER_WAIT_SECONDS  # its deletion wakes the job too
        observed, recheck = await self._observe(key, body, job, children)
        decision = self._decide(observed)
        decision = await self._apply_children(key, job, observed, decision)
        counts_delay = await self._store(key, body, job, observed.departed, decision)
        await self._act(key, job, decision)
        conflict = await self._apply_workload(key, job, observed.queue, decision)
        job.failing = None
        if decision.delete_job:
            await self._delete_expired(key)
            return None
        return self._requeue(job, decision, recheck, counts_delay, conflict)

    async def _read(self, key: JobKey) -> dict[str, Any] | None:
        """The job as it stands; None for one gone or being deleted, whose pods our finalizer
        holds are let go."""
        body = self._current_body(key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            await self.let_go(key, gone=True)
            return None
        return body

    async def _run_by_others(
        self, key: JobKey, body: dict[str, Any], job: JobState
    ) -> Ended | None:
        """How the pass ends for a job MultiKueue or another controller runs; None for one
        that is ours."""
        if await default_managed_by(self.kube, self.workloads, self.queueing, key, body, job):
            return Ended()  # its update wakes the job again
        if multikueue.dispatched(body.get("spec")):
            view = self._view(key, body)
            if view.spec is not None:
                delay = await run_dispatched(
                    self.kube, self.workloads, key, body, job, view, self._built
                )
                return Ended(delay)
        if await run_elsewhere(self.kube, key, body, job):
            return Ended()
        return None

    async def _earlier_job_in_the_way(
        self, key: JobKey, children: lineage.Lineage[StatefulSetObservation, PodObservation]
    ) -> bool:
        """Let go of the pods of an earlier job of this name, which the garbage collector is
        deleting; True while its StatefulSets are still there, said in the job's status once
        that lasts: the garbage collector deletes them in seconds, but never those orphaned on
        purpose."""
        own = {p.uid for p in children.pods}
        await self._let_go(key, [p for p in self.pods.get(key, []) if p.uid not in own])
        if not children.earlier_sets:
            return False
        message = (
            f"StatefulSet {', '.join(children.earlier_sets)} is not this TFJob's (an earlier "
            "TFJob of this name's, being deleted, or orphaned: then delete it)"
        )
        log.info("%s/%s: waiting: %s", *key, message)
        await self._persisting(key, message)
        return True

    async def _observe(
        self,
        key: JobKey,
        body: dict[str, Any],
        job: JobState,
        children: lineage.Lineage[StatefulSetObservation, PodObservation],
    ) -> tuple[Observed, float | None]:
        """What the decision is made on, once Kueue's integrations are kept off the children;
        and when the FailedCreate check is due again."""
        view, now = self._view(key, body), datetime.now(UTC)
        departed = self._departed(key, body, job)
        await keep_kueue_off(self.kube, self.queueing, key, body, job, children.sets, children.pods)
        queue = await self.workloads.queue_view(job, key, body, view)
        failures, recheck = await self.failed_creates.check(
            job, key, view, children.pods, children.sets
        )
        observed = Observed(
            view,
            children.pods,
            children.sets,
            now,
            queue,
            departed=departed,
            create_failures=failures,
            applied=job.generations,
        )
        return observed, recheck

    async def _apply_children(
        self, key: JobKey, job: JobState, observed: Observed, decision: Decision
    ) -> Decision:
        """Apply the decision's children unless they are the ones last applied, then label its
        pods; the decision that stands (for children Kubernetes will never take, the one on
        the spec it refused)."""
        fingerprint = hashlib.blake2b(
            json.dumps(decision.children, sort_keys=True).encode(), digest_size=16
        ).digest()
        if job.applied != fingerprint:
            forgotten = job.forgotten
            problem = await self._send_children(job, observed, decision)
            if problem is not None:
                decision = self._decide(observed.refused(problem))
            if job.forgotten == forgotten:
                job.applied = fingerprint
        await label_pods(self.kube, job, key[0], decision)
        return decision

    async def _send_children(
        self, job: JobState, observed: Observed, decision: Decision
    ) -> str | None:
        """Apply the decision's children: a new job's are created, and the StatefulSets seen
        tell which ones changed since the last apply of an earlier process. Why Kubernetes
        refused them, when no retry can heal it."""
        # A new job: nothing applied yet, no StatefulSet seen, no condition written.
        fresh = (
            job.applied is None and not observed.sets and not observed.view.status.get("conditions")
        )
        # Other children than this process applied before; else the first apply after a
        # start (or after a child was deleted), most likely the same children again, but for
        # StatefulSets of a job edited meanwhile.
        made = {(c["kind"], c["metadata"]["name"]) for c in decision.children}
        changed = (
            made if job.applied is not None else edited_meanwhile(decision.children, observed.sets)
        )
        # Children this process has not applied yet, but for the StatefulSets seen as the
        # job's: whose they are is looked at before they are applied over.
        ours = {("StatefulSet", s.name) for s in observed.sets}
        check = made - ours if job.applied is None else set()
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
            return f"Kubernetes refused a child: {api_message(e)}"
        return None

    async def _store(
        self,
        key: JobKey,
        body: dict[str, Any],
        job: JobState,
        departed: Collection[PodObservation],
        decision: Decision,
    ) -> float | None:
        """Write the decision to the job's status; how long a write of counts alone waits.

        The decision is stored before anything is acted on that cannot be undone: a job's end
        before its pods go (their exits are what decided it), a stop before its pods are
        deleted. A failed write or a crash in between repeats the acts, from the stored
        status, never the training."""
        counts_delay = counts_wait(job, decision, self.clock)
        if counts_delay is None:
            await write_status(self.kube, job, key, body, decision, self.children_first)
        # Their news is written now (a patch of counts alone, which may wait, holds none).
        for said in departed:
            job.departed.pop(said.uid, None)
        return counts_delay

    async def _act(self, key: JobKey, job: JobState, decision: Decision) -> None:
        """The decision's acts on pods and StatefulSets, in their order."""
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

    async def _apply_workload(
        self, key: JobKey, job: JobState, queue: QueueView | None, decision: Decision
    ) -> float | None:
        """The job's Kueue Workload as decided, or dropped once the job is queued no more; when
        to write its status again, after Kueue wrote meanwhile."""
        if decision.workload is not None and queue is not None:
            return await self.workloads.apply(job, key, queue.version, decision.workload)
        if queue is None and job.workloads:
            await self.workloads.drop(job, key)
        return None

    async def _delete_expired(self, key: JobKey) -> None:
        """A finished job past its ttlSecondsAfterFinished goes, and its children with it."""
        log.info("%s/%s: ttlSecondsAfterFinished passed; deleting", *key)
        await asyncio.to_thread(self.kube.delete_job, *key)

    def _requeue(self, job: JobState, decision: Decision, *waits: float | None) -> float | None:
        """When to look at the job again: the soonest of what the decision and the pass wait
        for; None when nothing is waited for."""
        delays = [d for d in (decision.requeue_after, *waits) if d is not None]
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
