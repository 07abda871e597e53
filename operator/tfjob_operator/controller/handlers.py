"""kopf wiring, and nothing else: settings, login, indexes, and events that wake a job.

Event handlers are async: they run on the event loop, where the work queue lives.

Every event only marks its TFJob for reconciliation (`workqueue.py`); the reconcile itself
(`reconcile.py`) reads kopf's index of TFJobs and what the children's watches keep
(`childwatch.py`), decides with pure functions and applies. These handlers keep no progress
annotations and add no finalizers, so deleting a TFJob never waits for us.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import os
from collections.abc import Hashable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf
import kubernetes

from tfjob_operator.api import podtemplate
from tfjob_operator.api.spec import GROUP, PLURAL, VERSION
from tfjob_operator.controller import heap, metrics
from tfjob_operator.controller.childwatch import ChildWatches, Kind
from tfjob_operator.controller.client import (
    STANDALONE_AGENT,
    Kube,
    configure_client,
    uses_kubeconfig,
)
from tfjob_operator.controller.jobstate import JobKey
from tfjob_operator.controller.leader import LeaderElector, default_namespace
from tfjob_operator.controller.projections import index_record
from tfjob_operator.controller.ratelimit import TokenBucket
from tfjob_operator.controller.reconcile import Reconciler
from tfjob_operator.controller.settings import OperatorConfig
from tfjob_operator.controller.workqueue import Work, WorkQueue
from tfjob_operator.rules import naming
from tfjob_operator.rules.gang import NATIVE_API, Gang, Scheduler
from tfjob_operator.rules.pods import observe
from tfjob_operator.rules.statefulsets import observe_statefulset

OURS = {naming.LABEL_MANAGED_BY: naming.MANAGED_BY}
# Sent with every watch and list of children: the API server filters, so another tenant's
# objects never reach the operator.
OURS_SELECTOR = f"{naming.LABEL_MANAGED_BY}={naming.MANAGED_BY}"
# What the operator watches besides TFJobs (`childwatch.py`): the pods and StatefulSets the rules
# read, and every other kind of child it makes, so that one deleted by someone else wakes its
# job and is made again at once. With a gang scheduler, its PodGroups too, through kopf
# (`watched`). (RBAC: list, watch.)
CHILDREN = [
    Kind("", "v1", "pods", "Pod", observe),
    Kind("apps", "v1", "statefulsets", "StatefulSet", observe_statefulset),
    Kind("", "v1", "services", "Service"),
    Kind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    Kind("apps", "v1", "deployments", "Deployment"),  # the TensorBoard's (spec.tensorboard)
]
OWNED = [(k.group, k.version, k.plural) for k in CHILDREN]
# With --kueue: the jobs' Workloads, in the version Kueue prefers (v1beta2, else v1beta1).
KUEUE_WORKLOADS = ("kueue.x-k8s.io", "workloads")
# Initial lists (at start, and after a watch expires) come in pages of this many objects.
LIST_PAGE = 500
LOST_LEASE_EXIT = 3  # the exit status of a replica that lost the leader Lease
# The API client is synchronous: its calls run in this many threads (asyncio's default is the
# cores + 4, which leaves a burst of new jobs queued behind a few requests in flight).
API_THREADS = 16


def watched(gang: Gang | None) -> list[tuple[str, str, str]]:
    """Every kind the operator watches besides TFJobs, each with our label selector: `OWNED`,
    and what the gang scheduler it runs with makes a gang of (PodGroups, Workloads)."""
    return [*OWNED, *(gang.scheduler.kinds if gang is not None else [])]


class _NoDiffBase(kopf.DiffBaseStorage):
    """No diff-base: kopf builds one (a deep copy of the whole body) on every event of every
    watched object for its change handlers (on.create/update/...), and we have none. Without
    one, kopf also stores no last-handled-configuration and clears no progress."""

    def build(self, **_: Any) -> Any:
        return None

    def fetch(self, **_: Any) -> None:
        return None

    def store(self, **_: Any) -> None:
        pass


@dataclasses.dataclass
class _Shared:
    """What handlers write for each other. kopf hands each object's handlers a shallow copy of
    the memo made when the object is first seen: a key set there is seen by no other object
    (nor by the elector's callbacks), while an object that every copy holds is shared."""

    handler_context: contextvars.Context | None = None  # the first handler's, for kopf.event


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    """All kopf settings in one place, and the watch of the gang scheduler's PodGroups when
    there is one; then, with leader election, the elector starts: until it holds the Lease,
    this replica watches and keeps its indexes warm but reconciles nothing."""
    configure_client(API_THREADS)
    memo.config = await _discover_gang(memo.config)
    config: OperatorConfig = memo.config
    settings.persistence.diffbase_storage = _NoDiffBase()
    settings.posting.level = logging.WARNING  # events are ours to write, not log lines
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.chunk_size = LIST_PAGE
    for resource in watched(config.gang):
        settings.watching.label_selectors[resource] = OURS_SELECTOR
    if config.queueing is not None:
        settings.watching.label_selectors[KUEUE_WORKLOADS] = OURS_SELECTOR
    if config.gang is not None:
        # Registered before kopf looks at what to watch (after the startup handlers). Without
        # the CRD, kopf logs that it cannot watch the kind (and watches it once the CRD comes,
        # unless it watches named namespaces only); the reconcile says so in the job's status.
        for kind in config.gang.scheduler.kinds:
            _watch_owned(*kind)
    # Named namespaces only: kopf neither lists namespaces nor watches CRDs, so the operator
    # makes no cluster-wide request at all (and needs no ClusterRole).
    settings.scanning.disabled = config.exact_namespaces
    settings.networking.request_timeout = 60
    settings.networking.enforce_retry_after = True  # a 429's Retry-After, as the server asks
    asyncio.get_running_loop().set_default_executor(
        ThreadPoolExecutor(API_THREADS, thread_name_prefix="api")
    )
    if config.metrics_port:
        metrics.serve(config.metrics_port)
    podtemplate.definitions()  # load Kubernetes' schema now, not in the first reconcile
    limiter = TokenBucket(config.api_qps, config.api_burst)
    election = config.leader_election
    memo.elector = None
    memo.shared = _Shared()
    if election is None:
        kube = Kube(limiter=limiter, group=config.api_group)
    else:
        memo.elector = LeaderElector(
            election.namespace,
            election.name,
            election.identity,
            election.timing,
            on_leading=lambda: _take_over(memo),
            on_lost=_exit_on_loss,
        )
        kube = Kube(memo.elector.may_write, memo.elector.user_agent, limiter, config.api_group)
    memo.reconciler = Reconciler(
        kube,
        config.cluster_domain,
        gang=config.gang,
        queueing=config.queueing,
        restart_rules=await _discover_restart_rules(kube, config),
    )
    memo.watches = ChildWatches(
        CHILDREN, lambda *event: _child_event(memo, *event), config.namespaces
    )
    memo.reconciler.pods = memo.watches.observations["pods"]
    memo.reconciler.statefulsets = memo.watches.observations["statefulsets"]
    _use_indexes(memo.reconciler, kwargs)
    memo.queue = WorkQueue(_once_listed(memo.watches, memo.reconciler))
    memo.watches.start(settings)
    trim = heap.libc_trim()
    memo.trim_task = None
    if trim is not None:
        queue = memo.queue
        memo.trim_task = asyncio.get_running_loop().create_task(
            heap.trim_after_work(lambda: queue.runs, trim), name="trim the heap after work"
        )
    metrics.watch_states(memo.reconciler.states)
    if memo.elector is not None:
        memo.election_task = asyncio.get_running_loop().create_task(memo.elector.guarded())


async def _discover_gang(config: OperatorConfig) -> OperatorConfig:
    """--gang-scheduler=auto: Kubernetes' own gangs where the API server serves them, else
    none. Asked once, at start: a cluster that turns the API on later needs a restart."""
    if not config.gang_auto:
        return config
    group, version, plural = NATIVE_API
    served = await asyncio.get_running_loop().run_in_executor(
        None, lambda: Kube(group=config.api_group).serves(group, version, plural)
    )
    gang = Gang(Scheduler.KUBERNETES) if served else None
    logging.getLogger(__name__).info(
        "gang scheduling: %s",
        "Kubernetes' own (scheduling.k8s.io/v1beta1)" if served else "none (not served here)",
    )
    return dataclasses.replace(config, gang=gang, gang_auto=False)


async def _discover_restart_rules(kube: Kube, config: OperatorConfig) -> bool:
    """Whether the API server keeps container restart rules, asked once at start in a
    namespace the operator may write in: then a task that ended stays ended. A server that
    cannot be asked keeps today's behaviour, and the log says why."""
    namespace = config.namespaces[0] if config.exact_namespaces else default_namespace()
    log = logging.getLogger(__name__)
    try:
        kept = await asyncio.to_thread(kube.keeps_restart_rules, namespace)
    except kubernetes.client.ApiException as e:
        log.warning("container restart rules: cannot ask (%s %s)", e.status, e.reason)
        return False
    log.info(
        "container restart rules: %s",
        "kept: a task that ended stays ended" if kept else "not served here: tasks restart",
    )
    return kept


def _take_over(memo: kopf.Memo) -> None:
    """The Lease is ours: reconcile every job known so far; events bring the rest.

    The reconciles start in the context of a handler that ran (kopf's Event queue lives in
    context variables that only handlers have): started from the elector's own context, they
    could write a status but not post its Events."""
    context = memo.shared.handler_context
    keys = list(memo.reconciler.jobs)
    if context is None:
        return  # no event yet, so no job known yet
    memo.reconciler.start_first_pass()
    context.run(lambda: [memo.queue.schedule(key) for key in keys])


def _exit_on_loss(why: str) -> None:
    """A leader that lost its Lease has stopped writing (the fence); it exits, as Kubernetes'
    own controllers do, and comes back as a standby with nothing stale in memory."""
    logging.shutdown()
    os._exit(LOST_LEASE_EXIT)


def _once_listed(watches: ChildWatches, reconciler: Reconciler) -> Work:
    """The reconcile, once every child is known: before, a job would look as if its pods
    were gone."""

    async def work(key: Hashable) -> float | None:
        await watches.listed.wait()
        return await reconciler(key)  # type: ignore[arg-type]

    return work


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    memo.queue.close()
    if memo.trim_task is not None:
        memo.trim_task.cancel()
    await memo.watches.stop()
    if memo.elector is not None:
        await memo.elector.stop()


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Connection(kopf.ConnectionInfo):
    """kopf's connection, whose requests say who sends them as our own client's do: one user
    agent for the whole operator (API Priority and Fairness and audit logs group by it)."""

    user_agent: str = STANDALONE_AGENT

    def as_http_headers(self) -> dict[str, str]:
        return {**super().as_http_headers(), "User-Agent": self.user_agent}


@kopf.on.login()
def login(memo: kopf.Memo, **kwargs: Any) -> kopf.ConnectionInfo | None:
    """$KUBECONFIG first, in-cluster second: the same order as `kube.configure_client`."""
    if uses_kubeconfig():
        info = kopf.login_with_kubeconfig(memo=memo, **kwargs)
    else:
        info = kopf.login_with_service_account(memo=memo, **kwargs)
    if info is None:
        return None
    elector = memo.get("elector")
    agent = elector.user_agent if elector is not None else STANDALONE_AGENT
    fields = {f.name: getattr(info, f.name) for f in dataclasses.fields(info)}
    return _Connection(**fields, user_agent=agent)


# Indexers are coroutines: kopf runs a plain function in a thread of its executor, a hop per
# event that costs more than the function itself. (kopf types `namespace` as optional, for
# cluster-scoped resources; everything watched here is namespaced, hence the ignores.)
async def tfjobs(
    body: kopf.Body, namespace: str, name: str, **_: Any
) -> dict[JobKey, dict[str, Any]]:
    return {(namespace, name): index_record(body)}


def _use_indexes(reconciler: Reconciler, kwargs: dict[str, Any]) -> None:
    """kopf's live index of TFJobs, which every handler receives."""
    reconciler.jobs = kwargs["tfjobs"]


def _leading(memo: kopf.Memo) -> bool:
    return memo.elector is None or memo.elector.leading


def _wake(memo: kopf.Memo, key: tuple[str, str], kwargs: dict[str, Any]) -> None:
    _use_indexes(memo.reconciler, kwargs)
    if memo.shared.handler_context is None:
        memo.shared.handler_context = contextvars.copy_context()
        if _leading(memo):
            memo.reconciler.start_first_pass()
    if _leading(memo):
        memo.queue.schedule(key)


async def job_event(
    type: str, namespace: str, name: str, meta: kopf.Meta, memo: kopf.Memo, **kwargs: Any
) -> None:
    """A TFJob wakes itself, unless the event only brings back our own status write: the
    reconcile that wrote it has seen everything that write says."""
    key = (namespace, name)
    if type == "DELETED" and _leading(memo):
        metrics.JOBS_DELETED.labels(namespace).inc()
    if type == "MODIFIED" and memo.reconciler.caught_up(key, meta.get("resourceVersion")):
        _use_indexes(memo.reconciler, kwargs)
        return
    _wake(memo, key, kwargs)


def _child_event(
    memo: kopf.Memo, plural: str, type: str, key: JobKey, body: dict[str, Any]
) -> None:
    """A child's event that may change its job's decision (`childwatch.py`) wakes the job; a
    child deleted by someone else is made again on that wake-up. A standby has applied
    nothing to forget; it reconciles nothing."""
    if not _leading(memo):
        return
    if type == "DELETED" and plural == "pods":
        memo.reconciler.pod_deleted(key, body)  # what a stopped pod said
    elif type == "DELETED":
        memo.reconciler.forget_children(key)
    context = memo.shared.handler_context
    if context is not None:  # else no job is known yet: their own events will come
        context.run(memo.queue.schedule, key)
    elif plural == "pods" and _held_going(body, memo.reconciler.kube.group):
        # No job may ever come (deleted while the operator was away): its pods that our
        # finalizer holds are let go all the same, as their StatefulSets go.
        task = asyncio.get_running_loop().create_task(_let_go(memo, key))
        _letting_go.add(task)  # held until done: the loop keeps only a weak reference
        task.add_done_callback(_letting_go.discard)


_letting_go: set[asyncio.Task[None]] = set()


async def _let_go(memo: kopf.Memo, key: JobKey) -> None:
    await memo.watches.listed.wait()
    await memo.reconciler.let_go(key)


def _held_going(body: dict[str, Any], group: str) -> bool:
    """A pod of ours being deleted that our finalizer (of the API group served) holds."""
    pod = observe(body)
    return pod is not None and pod.deleting and pod.finalized == group


async def owned_event(
    type: str, namespace: str, labels: kopf.Labels, memo: kopf.Memo, **kwargs: Any
) -> None:
    """A PodGroup (the gang scheduler's, watched through kopf) deleted by someone else wakes
    its job, which makes it again."""
    job = labels.get(naming.LABEL_JOB_NAME)
    if job is None or type != "DELETED":
        return
    key = (namespace, job)
    if _leading(memo):
        memo.reconciler.forget_children(key)
    _wake(memo, key, kwargs)


async def workload_event(
    type: str, namespace: str, body: kopf.Body, labels: kopf.Labels, memo: kopf.Memo, **kwargs: Any
) -> None:
    """A job's Kueue Workload: admitted, evicted, deleted... wakes its job when it changed."""
    job = labels.get(naming.LABEL_JOB_NAME)
    if job is None:
        return
    key = (namespace, job)
    if memo.reconciler.workload_seen(key, dict(body), type == "DELETED"):
        _wake(memo, key, kwargs)


def _watch_owned(group: str, version: str, plural: str) -> None:
    """Send the events of one kind of child, ours only, to `owned_event`."""
    kopf.on.event(group, version, plural, labels=OURS, id=f"owned-{plural}")(owned_event)  # type: ignore[arg-type]


_registered: list[str] = []  # the group registered for, once


def register(group: str = GROUP, kueue: bool = False) -> None:
    """Register the handlers whose resource depends on the API group served (`--api-group`):
    the TFJobs' index and events, and the children's events; with `kueue`, the Workloads'
    events (the version Kueue prefers, whichever it serves). Before kopf runs; once."""
    if _registered:
        if _registered != [group]:
            raise RuntimeError(f"handlers are registered for {_registered[0]}, not {group}")
        return
    _registered.append(group)
    kopf.index(group, VERSION, PLURAL, id="tfjobs")(tfjobs)  # type: ignore[arg-type]
    kopf.on.event(group, VERSION, PLURAL, id="job_event")(job_event)  # type: ignore[arg-type]
    if kueue:
        kopf.on.event(*KUEUE_WORKLOADS, labels=OURS, id="kueue-workloads")(workload_event)  # type: ignore[arg-type]


@kopf.on.probe(id="tfjobs")
async def count_jobs(**kwargs: Any) -> int:
    return len(kwargs["tfjobs"])
