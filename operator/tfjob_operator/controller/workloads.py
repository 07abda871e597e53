"""The reconciler's side of Kueue (--kueue): a queued job's place in Kueue read (its Workload
as last seen, the ResourceFlavors it was admitted on, its priority class), and its Workload
made, updated in place, replaced, given its status or dropped as the rules decide
(`rules/kueue/`)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import kubernetes

from tfjob_operator.controller.client import Kube, MissingAPI
from tfjob_operator.controller.jobstate import JobKey, JobState
from tfjob_operator.rules import kueue
from tfjob_operator.rules.kueue import multikueue
from tfjob_operator.rules.kueue.admission import Flavor, WorkloadObservation, observe_workload
from tfjob_operator.rules.kueue.queue import (
    Priority,
    Queueing,
    QueueView,
    global_default,
    priority_class,
    priority_class_api,
    queue_name,
)
from tfjob_operator.rules.kueue.workload import WorkloadDecision
from tfjob_operator.rules.lifecycle import JobView

log = logging.getLogger(__name__)

# A ResourceFlavor or priority class read is used this long before it is read again.
CLUSTER_READ_SECONDS = 60.0
# A Workload status write refused for a newer Workload (Kueue wrote meanwhile) is redone after.
WORKLOAD_CONFLICT_SECONDS = 0.5


def seen(workloads: dict[str, WorkloadObservation], body: dict[str, Any], deleted: bool) -> bool:
    """Keep what a Workload event says in its job's `workloads`; True when it is news."""
    name = (body.get("metadata") or {}).get("name", "")
    if deleted:
        return workloads.pop(name, None) is not None
    observed = observe_workload(body)
    if workloads.get(name) == observed:
        return False
    workloads[name] = observed
    return True


@dataclass
class Workloads:
    """What the reconciler remembers of Kueue across jobs: the Workload API version served,
    and the cluster-scoped objects the jobs' Workloads name."""

    kube: Kube
    # The reconciler's clock: seconds that only ever go forward.
    clock: Callable[[], float]
    # Kueue (--kueue): None when the queue label is not read.
    queueing: Queueing | None = None
    # Cluster-scoped reads (ResourceFlavors, priority classes): (group, plural, name) ->
    # (when read, the object or None); name "" holds the global default PriorityClass.
    cluster_reads: dict[tuple[str, str, str], tuple[float, Any]] = field(default_factory=dict)
    version: str | None = None

    async def queue_view(
        self, job: JobState, key: JobKey, body: dict[str, Any], view: JobView
    ) -> QueueView | None:
        """The job's place in Kueue, for a job that waits in a LocalQueue (`--kueue`): its
        Workload as last seen, the flavors it was admitted on, its priority."""
        meta = body["metadata"]
        name = queue_name(meta.get("labels") or {}, self.queueing)
        if name is None or view.spec is None:
            job.queue = None
            return None
        version = await self._version()
        if version is None:
            raise MissingAPI(
                f"the TFJob waits in LocalQueue {name} (label {kueue.QUEUE_LABEL}), but Kueue "
                f"is not installed: no {kueue.GROUP} Workload API on this cluster. Install "
                "Kueue, or remove the label to run the job without it"
            )
        uid = meta.get("uid", "")
        prebuilt = multikueue.prebuilt_name(meta)
        workload = job.workloads.get(prebuilt or kueue.workload_name(key[1], uid))
        if prebuilt is not None and workload is None:
            # Kueue made it before the job: its watch event may have come before the job's
            # own, and gone with a job not known yet.
            found = await asyncio.to_thread(
                self.kube.get_cluster_object, kueue.GROUP, version, "workloads", prebuilt, key[0]
            )
            if found is not None:
                seen(job.workloads, found, False)
                workload = job.workloads.get(prebuilt)
        if prebuilt is not None and workload is not None and multikueue.taken(workload, uid):
            log.warning("%s/%s: Workload %s is another object's; waiting", *key, prebuilt)
            workload = None
        flavors = await self._flavors(workload, version)
        wanted = priority_class(meta.get("labels") or {}, view.spec)
        # A Workload about to be made takes its priority as the cluster says it now, as Kueue's
        # own controllers do (a class made a moment ago counts); one that exists keeps its own.
        fresh = workload is None
        priority: Priority | None
        if wanted is not None:
            priority = await self._priority(*wanted, version, fresh)
        else:
            priority = await self._default_priority(fresh)
        job.queue = QueueView(name, version, workload, flavors, priority, prebuilt is not None)
        return job.queue

    async def multikueue_checks(self, namespace: str, queue: str) -> list[Any]:
        """The MultiKueue AdmissionChecks of the ClusterQueue the LocalQueue `queue` leads to
        ([] when none, or Kueue, the queue or the ClusterQueue is missing). The cluster's
        AdmissionChecks are listed at most once a CLUSTER_READ_SECONDS, and only where one is
        MultiKueue's are the LocalQueue (anew: a job asks once, before it starts) and its
        ClusterQueue read."""
        version = await self._version()
        if version is None:
            return []
        every = await self._cluster_read(kueue.GROUP, version, "admissionchecks", "")
        checks = {c["metadata"]["name"]: c for c in every or [] if multikueue.is_multikueue(c)}
        if not checks:
            return []
        local = await asyncio.to_thread(
            self.kube.get_cluster_object, kueue.GROUP, version, "localqueues", queue, namespace
        )
        cq = ((local or {}).get("spec") or {}).get("clusterQueue")
        found = await self._cluster_read(kueue.GROUP, version, "clusterqueues", cq) if cq else None
        return [checks[n] for n in multikueue.admission_checks(found) if n in checks]

    async def _flavors(
        self, workload: WorkloadObservation | None, version: str
    ) -> dict[str, Flavor]:
        """The ResourceFlavors the Workload was admitted on, by name."""
        flavors = {}
        for flavor in sorted(workload.flavor_names()) if workload is not None else []:
            found = await self._cluster_read(kueue.GROUP, version, "resourceflavors", flavor)
            if found is None:
                raise MissingAPI(
                    f"Kueue admitted the job on ResourceFlavor {flavor}, which does not exist"
                )
            flavors[flavor] = Flavor.from_body(found)
        return flavors

    async def _priority(self, group: str, pc: str, version: str, fresh: bool) -> Priority:
        """The priority the job's priority class gives (a PriorityClass or Kueue's own)."""
        found = await self._cluster_read(group, *priority_class_api(group, version), pc, fresh)
        if found is None:
            raise MissingAPI(f"the TFJob names priority class {pc} ({group}), which does not exist")
        return Priority(group, pc, int(found.get("value", 0)))

    async def _default_priority(self, fresh: bool) -> Priority | None:
        """The cluster's globalDefault PriorityClass, which Kueue gives a job that names no
        class; the list is read at most once a CLUSTER_READ_SECONDS, unless `fresh`."""
        now = self.clock()
        key = (kueue.POD_PRIORITY_GROUP, "priorityclasses", "")
        cached = self.cluster_reads.get(key)
        if fresh or cached is None or now - cached[0] >= CLUSTER_READ_SECONDS:
            found = await asyncio.to_thread(
                self.kube.list_cluster_objects, kueue.POD_PRIORITY_GROUP, "v1", "priorityclasses"
            )
            cached = (now, global_default(found))
            self.cluster_reads[key] = cached
        return cast(Priority | None, cached[1])

    async def drop(self, job: JobState, key: JobKey) -> None:
        """A job that no longer waits in a queue (its label gone, its spec invalid) keeps no
        Workload, so that no quota stays reserved for it."""
        version = await self._version()
        if version is None:
            return
        for name in list(job.workloads):
            log.info("%s/%s: deleting Workload %s: the job waits in no queue", *key, name)
            await asyncio.to_thread(self.kube.delete_workload, version, key[0], name)

    async def apply(
        self, job: JobState, key: JobKey, version: str, decision: WorkloadDecision
    ) -> float | None:
        """Replace, make or update the job's Workload (its spec in place, or its status); the
        seconds after which to try again when Kueue wrote it meanwhile."""
        namespace = key[0]
        if decision.delete is not None:
            log.info("%s/%s: replacing Workload %s: the job's spec changed", *key, decision.delete)
            await asyncio.to_thread(self.kube.delete_workload, version, namespace, decision.delete)
        if decision.create is not None:
            await asyncio.to_thread(self.kube.create_workload, decision.create)
        name = job.queue.workload.name if job.queue and job.queue.workload else ""
        for patch, write in (
            (decision.update, self.kube.patch_workload),
            (decision.status_patch, self.kube.patch_workload_status),
        ):
            if not patch:
                continue
            try:
                await asyncio.to_thread(write, version, namespace, name, patch)
            except kubernetes.client.ApiException as e:
                if e.status != 409:
                    raise
                return WORKLOAD_CONFLICT_SECONDS
        return None

    async def _version(self) -> str | None:
        """The Workload API version served, asked once it is found; None without Kueue (asked
        again next time: Kueue may be installed meanwhile)."""
        if self.version is None:
            self.version = await asyncio.to_thread(self.kube.workload_version)
        return self.version

    async def _cluster_read(
        self, group: str, version: str, plural: str, name: str, fresh: bool = False
    ) -> Any:
        """A cluster-scoped object, read at most once a CLUSTER_READ_SECONDS (unless `fresh`);
        None if absent. Name "": every object of the kind, listed."""
        now = self.clock()
        cached = self.cluster_reads.get((group, plural, name))
        if not fresh and cached is not None and now - cached[0] < CLUSTER_READ_SECONDS:
            return cached[1]
        if name:
            read = functools.partial(self.kube.get_cluster_object, group, version, plural, name)
        else:
            read = functools.partial(self.kube.list_cluster_objects, group, version, plural)
        found = await asyncio.to_thread(read)
        self.cluster_reads[(group, plural, name)] = (now, found)
        return found
