"""One reconcile of one TFJob: read from kopf's indexes, decide (pure), then apply.

This is the only place that turns a `Decision` into API calls. It is safe to run twice, after a
crash or a conflict: children are server-side applied, the status is a merge patch computed
against the stored status, and the decision itself depends only on what is observed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
import kubernetes

from . import metrics
from .kube import Kube
from .lifecycle import JobView, decide
from .pods import PodObservation
from .workqueue import RetryableError

log = logging.getLogger(__name__)

JobKey = tuple[str, str]  # (namespace, name)


@dataclass
class Reconciler:
    kube: Kube
    cluster_domain: str
    jobs: Mapping[JobKey, Any] = field(default_factory=dict)  # kopf index: key -> [body]
    pods: Mapping[JobKey, Any] = field(default_factory=dict)  # kopf index: key -> [observation]
    # What we last applied per job, so unchanged children are not re-sent on every pod event.
    _applied: dict[JobKey, str] = field(default_factory=dict)
    # Our last status write per job: (resourceVersion it was based on, object it produced).
    # Until the watch delivers our own write, the index still holds the older object.
    _written: dict[JobKey, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    # Specs whose children Kubernetes refused, by generation: judged invalid until they change.
    _refused: dict[JobKey, tuple[Any, str]] = field(default_factory=dict)

    def forget_children(self, key: JobKey) -> None:
        """A child was deleted behind our back: apply everything again next time."""
        self._applied.pop(key, None)

    def _current_body(self, key: JobKey) -> dict[str, Any] | None:
        bodies = list(self.jobs.get(key, []))
        if not bodies:
            for cache in (self._applied, self._written, self._refused):
                cache.pop(key, None)
            return None
        body = bodies[0]
        written = self._written.get(key)
        if written is not None:
            base_rv, result = written
            if body["metadata"].get("resourceVersion") == base_rv:
                return result
            del self._written[key]
        return body

    async def __call__(self, key: JobKey) -> float | None:
        with metrics.RECONCILE_SECONDS.time():
            try:
                delay = await self._reconcile(key)
            except kubernetes.client.ApiException as e:
                message = _api_message(e)
                if e.status == 403 and "being terminated" in message:
                    log.debug("%s/%s: namespace is being deleted; nothing to do", *key)
                    return None
                metrics.RECONCILES.labels("error").inc()
                raise RetryableError(f"{e.status} {e.reason}: {message}") from None
            except Exception:
                metrics.RECONCILES.labels("error").inc()
                raise
        metrics.RECONCILES.labels("ok").inc()
        return delay

    async def _reconcile(self, key: JobKey) -> float | None:
        body = self._current_body(key)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return None
        observed: list[PodObservation] = list(self.pods.get(key, []))
        view, now = JobView.from_body(body), datetime.now(UTC)
        generation = body["metadata"].get("generation")
        refusal = self._refused.get(key)
        if refusal is not None and refusal[0] == generation:
            view = JobView(view.ref, None, (refusal[1],), view.status)
        decision = decide(view, observed, now, self.cluster_domain)

        fingerprint = json.dumps(decision.children, sort_keys=True)
        if self._applied.get(key) != fingerprint:
            try:
                await asyncio.to_thread(self._apply_all, decision.children)
            except kubernetes.client.ApiException as e:
                if e.status != 422:
                    raise
                # Kubernetes refuses what the spec makes (e.g. a port out of range): that is an
                # invalid spec too, and sending the same children again would be refused again.
                problem = f"Kubernetes refused a child: {_api_message(e)}"
                self._refused[key] = (generation, problem)
                refused = JobView(view.ref, None, (problem,), view.status)
                decision = decide(refused, observed, now, self.cluster_domain)
            self._applied[key] = fingerprint

        if decision.patch:
            try:
                result = await asyncio.to_thread(
                    self.kube.patch_status, key[0], key[1], decision.patch
                )
            except kubernetes.client.ApiException as e:
                if e.status == 404:
                    return None  # deleted meanwhile
                raise
            self._written[key] = (body["metadata"].get("resourceVersion", ""), result)
            metrics.STATUS_WRITES.inc()
        for type_, reason, message in decision.events:
            kopf.event(body, type=type_, reason=reason, message=message)
            metrics.TRANSITIONS.labels(reason).inc()
            log.info("%s/%s: %s: %s", key[0], key[1], reason, message)

        if decision.delete_job:
            log.info("%s/%s: ttlSecondsAfterFinished passed; deleting", *key)
            await asyncio.to_thread(self.kube.delete_job, *key)
            return None
        return decision.requeue_after

    def _apply_all(self, children: list[dict[str, Any]]) -> None:
        for child in children:
            self.kube.apply(child)


def _api_message(e: kubernetes.client.ApiException) -> str:
    try:
        return json.loads(e.body or "{}").get("message") or str(e.reason)
    except (ValueError, AttributeError):
        return str(e.body or e.reason)
