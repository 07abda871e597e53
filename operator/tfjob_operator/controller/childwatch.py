"""The watches of the jobs' children: pods, StatefulSets, Services, claims and Deployments.

They use kopf's own list and watch (pages, bookmarks, a new list after 410 Gone, reconnects,
the label selector, the timeouts of `settings.watching`) but not kopf's handling of each event:
a per-object worker, cause detection, loggers, a patch and a memory per object, which cost
milliseconds an event, most of the operator's CPU at a thousand jobs, and a record per child
for as long as it exists. Here an event costs a lookup: a child the rules read (pods,
StatefulSets) is reduced to its observation and kept per job; the others are kept as their uid
alone, since only their deletion matters (the job makes them again).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
from kopf._cogs.clients import watching
from kopf._cogs.structs import references

from tfjob_operator.controller.jobstate import JobKey
from tfjob_operator.rules import naming

log = logging.getLogger(__name__)

# After a watch fails (403, a dropped API), the next attempt comes this much later.
RETRY_SECONDS = 10.0

Observe = Callable[[dict[str, Any]], Hashable | None]


@dataclass(frozen=True)
class Kind:
    """One kind of child: where it is served, and what the rules read of it (`observe`: an
    observation, None for an object that is not ours; no `observe`: nothing but its uid)."""

    group: str
    version: str
    plural: str
    kind: str
    observe: Observe | None = None

    def resource(self) -> references.Resource:
        return references.Resource(
            self.group, self.version, self.plural, kind=self.kind, namespaced=True
        )


class Observations(Mapping[JobKey, tuple[Any, ...]]):
    """Per job, the observations of one kind of child (as kopf's indexes hand them out)."""

    def __init__(self) -> None:
        self._by_job: dict[JobKey, dict[str, Any]] = {}

    def __getitem__(self, key: JobKey) -> tuple[Any, ...]:
        return tuple(self._by_job[key].values())

    def __iter__(self) -> Iterator[JobKey]:
        return iter(self._by_job)

    def __len__(self) -> int:
        return len(self._by_job)

    def put(self, key: JobKey, uid: str, observation: Any) -> bool:
        """Keep a child's observation; whether it differs from the one kept before."""
        kept = self._by_job.setdefault(key, {})
        if kept.get(uid) == observation:
            return False
        kept[uid] = observation
        return True

    def drop(self, key: JobKey, uid: str) -> None:
        kept = self._by_job.get(key)
        if kept is not None:
            kept.pop(uid, None)
            if not kept:
                del self._by_job[key]


# What a child's event tells its job: (kind's plural, event type, job, the raw body).
OnEvent = Callable[[str, str, JobKey, dict[str, Any]], None]


@dataclass
class ChildWatches:
    """Every kind in `kinds`, watched in `namespaces` (empty: cluster-wide; a glob: cluster-wide
    and matched here). `on_event` hears each event that may change a decision: a deletion,
    or a change of what the rules read. `listed` is set once every watch has listed."""

    kinds: list[Kind]
    on_event: OnEvent
    namespaces: tuple[str, ...] = ()
    observations: dict[str, Observations] = field(init=False)
    listed: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    # Per kind, the uid of every child known, and its job: what a new list no longer shows
    # was deleted while the watch was down.
    _owners: dict[str, dict[str, JobKey]] = field(init=False)
    _waiting: set[tuple[str, str | None]] = field(init=False, default_factory=set)
    _tasks: list[asyncio.Task[None]] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.observations = {k.plural: Observations() for k in self.kinds if k.observe}
        self._owners = {k.plural: {} for k in self.kinds}

    def _scopes(self) -> list[str | None]:
        exact = references.select_specific_namespaces(self.namespaces)
        if self.namespaces and len(exact) == len(self.namespaces):
            return [str(ns) for ns in sorted(exact)]
        return [None]  # all namespaces, or globs: one cluster-wide watch, matched here

    def _wanted(self, namespace: str) -> bool:
        return not self.namespaces or any(
            references.match_namespace(references.NamespaceName(namespace), p)
            for p in self.namespaces
        )

    def start(self, settings: kopf.OperatorSettings) -> None:
        loop = asyncio.get_running_loop()
        for kind in self.kinds:
            for scope in self._scopes():
                self._waiting.add((kind.plural, scope))
                name = f"watch of {kind.plural} in {scope or 'all namespaces'}"
                self._tasks.append(loop.create_task(self._run(settings, kind, scope), name=name))
        if not self._waiting:
            self.listed.set()

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _run(self, settings: kopf.OperatorSettings, kind: Kind, scope: str | None) -> None:
        where = scope or "all namespaces"
        while True:
            listing: set[str] = set()
            try:
                async for event in watching.infinite_watch(
                    settings=settings,
                    resource=kind.resource(),
                    namespace=references.NamespaceName(scope) if scope else None,
                ):
                    if event is watching.Bookmark.LISTED:
                        self._listed(kind, scope, listing)
                        listing = set()
                        continue
                    assert not isinstance(event, watching.Bookmark)
                    if event["type"] == "BOOKMARK":
                        continue
                    body: dict[str, Any] = event["object"]  # type: ignore[assignment]
                    if event["type"] is None:
                        listing.add((body.get("metadata") or {}).get("uid", ""))
                    self.handle(kind, event["type"], body)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.error("watching %s in %s failed: %s", kind.plural, where, e)
            await asyncio.sleep(RETRY_SECONDS)

    def _listed(self, kind: Kind, scope: str | None, listing: set[str]) -> None:
        """A (new) list is complete: a child it no longer shows was deleted unseen."""
        owners = self._owners[kind.plural]
        gone = [
            (uid, key)
            for uid, key in owners.items()
            if uid not in listing and (scope is None or key[0] == scope)
        ]
        for uid, key in gone:
            meta = {"uid": uid, "namespace": key[0], "labels": {naming.LABEL_JOB_NAME: key[1]}}
            self.handle(kind, "DELETED", {"metadata": meta})
        self._waiting.discard((kind.plural, scope))
        if not self._waiting:
            self.listed.set()

    def handle(self, kind: Kind, type_: str | None, body: dict[str, Any]) -> None:
        """One event of one child: keep what is read of it, and tell its job when that may
        change a decision."""
        meta = body.get("metadata") or {}
        job = (meta.get("labels") or {}).get(naming.LABEL_JOB_NAME)
        namespace, uid = meta.get("namespace", ""), meta.get("uid", "")
        if job is None or not self._wanted(namespace):
            return
        key, owners = (namespace, job), self._owners[kind.plural]
        index = self.observations.get(kind.plural)
        if type_ == "DELETED":
            owners.pop(uid, None)
            if index is not None:
                index.drop(key, uid)
            self.on_event(kind.plural, "DELETED", key, body)
            return
        owners[uid] = key
        if index is None or kind.observe is None:
            return  # only its deletion matters
        observation = kind.observe(body)
        if observation is not None and index.put(key, uid, observation):
            self.on_event(kind.plural, type_ or "ADDED", key, body)
