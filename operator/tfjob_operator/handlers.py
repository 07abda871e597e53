"""kopf wiring, and nothing else: settings, login, indexes, and events that wake a job.

Event handlers are async: they run on the event loop, where the work queue lives.

Every event only marks its TFJob for reconciliation (`workqueue.py`); the reconcile itself
(`reconcile.py`) reads kopf's indexes, decides with pure functions and applies. These handlers
keep no progress annotations and add no finalizers, so deleting a TFJob never waits for us.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import logging
import os
from typing import Any

import kopf

from . import metrics, naming, podtemplate
from .api import GROUP, PLURAL, VERSION
from .config import OperatorConfig
from .kube import Kube, configure_client, uses_kubeconfig
from .leader import LeaderElector
from .owned import observe_statefulset
from .pods import observe
from .reconcile import Reconciler
from .workqueue import WorkQueue

OURS = {naming.LABEL_MANAGED_BY: naming.MANAGED_BY}
LOST_LEASE_EXIT = 3  # the exit status of a replica that lost the leader Lease


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    """All kopf settings in one place, under our own API group; then, with leader election,
    the elector starts: until it holds the Lease, this replica watches and keeps its indexes
    warm but reconciles nothing."""
    settings.persistence.finalizer = f"{GROUP}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING  # events are ours to write, not log lines
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.networking.request_timeout = 60
    configure_client()
    if memo.config.metrics_port:
        metrics.serve(memo.config.metrics_port)
    podtemplate.definitions()  # load Kubernetes' schema now, not in the first reconcile
    config: OperatorConfig = memo.config
    election = config.leader_election
    memo.elector = None
    if election is None:
        kube = Kube()
    else:
        memo.elector = LeaderElector(
            election.namespace,
            election.name,
            election.identity,
            election.timing,
            on_leading=lambda: _take_over(memo),
            on_lost=_exit_on_loss,
        )
        kube = Kube(memo.elector.may_write, user_agent=memo.elector.user_agent)
    memo.reconciler = Reconciler(kube, config.cluster_domain, gang=config.gang)
    _use_indexes(memo.reconciler, kwargs)
    memo.queue = WorkQueue(memo.reconciler)
    metrics.watch_states(memo.reconciler.states)
    if memo.elector is not None:
        memo.election_task = asyncio.get_running_loop().create_task(memo.elector.guarded())


def _take_over(memo: kopf.Memo) -> None:
    """The Lease is ours: reconcile every job known so far; events bring the rest.

    The reconciles start in the context of a handler that ran (kopf's Event queue lives in
    context variables that only handlers have): started from the elector's own context, they
    could write a status but not post its Events."""
    context = memo.get("handler_context")
    keys = list(memo.reconciler.jobs)
    if context is None:
        return  # no event yet, so no job known yet
    context.run(lambda: [memo.queue.schedule(key) for key in keys])


def _exit_on_loss(why: str) -> None:
    """A leader that lost its Lease has stopped writing (the fence); it exits, as Kubernetes'
    own controllers do, and comes back as a standby with nothing stale in memory."""
    logging.shutdown()
    os._exit(LOST_LEASE_EXIT)


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    memo.queue.close()
    if memo.elector is not None:
        await memo.elector.stop()


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """$KUBECONFIG first, in-cluster second: the same order as `kube.configure_client`."""
    if uses_kubeconfig():
        return kopf.login_with_kubeconfig(**kwargs)
    return kopf.login_with_service_account(**kwargs)


@kopf.index(GROUP, VERSION, PLURAL)
def tfjobs(body: kopf.Body, namespace: str, name: str, **_: Any) -> dict[Any, Any]:
    return {(namespace, name): copy.deepcopy(dict(body))}


@kopf.index("pods", labels=OURS)
def tfjob_pods(body: kopf.Body, namespace: str, labels: kopf.Labels, **_: Any) -> Any:
    obs = observe(dict(body))
    job = labels.get(naming.LABEL_JOB_NAME)
    return {(namespace, job): obs} if obs is not None and job else None


@kopf.index("apps", "v1", "statefulsets", labels=OURS)
def tfjob_statefulsets(body: kopf.Body, namespace: str, labels: kopf.Labels, **_: Any) -> Any:
    obs = observe_statefulset(dict(body))
    job = labels.get(naming.LABEL_JOB_NAME)
    return {(namespace, job): obs} if obs is not None and job else None


def _use_indexes(reconciler: Reconciler, kwargs: dict[str, Any]) -> None:
    """kopf's live indexes, which every handler receives."""
    reconciler.jobs, reconciler.pods = kwargs["tfjobs"], kwargs["tfjob_pods"]
    reconciler.statefulsets = kwargs["tfjob_statefulsets"]


def _leading(memo: kopf.Memo) -> bool:
    return memo.elector is None or memo.elector.leading


def _wake(memo: kopf.Memo, key: tuple[str, str], kwargs: dict[str, Any]) -> None:
    _use_indexes(memo.reconciler, kwargs)
    if memo.get("handler_context") is None:
        memo.handler_context = contextvars.copy_context()
    if _leading(memo):
        memo.queue.schedule(key)


@kopf.on.event(GROUP, VERSION, PLURAL)
async def job_event(type: str, namespace: str, name: str, memo: kopf.Memo, **kwargs: Any) -> None:
    if type == "DELETED" and _leading(memo):
        metrics.JOBS_DELETED.labels(namespace).inc()
    _wake(memo, (namespace, name), kwargs)


async def owned_event(
    type: str,
    namespace: str,
    labels: kopf.Labels,
    resource: kopf.Resource,
    memo: kopf.Memo,
    **kwargs: Any,
) -> None:
    """Pods wake their job; a child deleted by someone else is recreated on that wake-up."""
    job = labels.get(naming.LABEL_JOB_NAME)
    if job is None:
        return
    if type == "DELETED" and resource.plural != "pods":
        memo.reconciler.forget_children((namespace, job))
    _wake(memo, (namespace, job), kwargs)


# What the operator watches besides TFJobs: everything it owns. (RBAC: list and watch.)
OWNED = [
    ("", "v1", "pods"),
    ("apps", "v1", "statefulsets"),
    ("", "v1", "services"),
    ("", "v1", "persistentvolumeclaims"),
]
for _group, _version, _plural in OWNED:
    kopf.on.event(_group, _version, _plural, labels=OURS, id=f"owned-{_plural}")(owned_event)


@kopf.on.probe(id="tfjobs")
def count_jobs(tfjobs: Any, **_: Any) -> int:
    return len(tfjobs)
