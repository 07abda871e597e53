"""Why a StatefulSet lacks pods: its FailedCreate events, looked at only for one that still
lacks them after a grace period, at most every few seconds per job, and listed once for every
job of a namespace that looks within a moment. A healthy job costs no call."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from tfjob_operator.controller.client import Kube
from tfjob_operator.controller.jobstate import CreateCheck, JobKey, JobState
from tfjob_operator.rules.lifecycle import JobView
from tfjob_operator.rules.pods import PodObservation
from tfjob_operator.rules.statefulsets import StatefulSetObservation, lacking

# A StatefulSet that still lacks pods after the grace period is looked at for FailedCreate
# events, and again while it lacks them: first after CREATE_CHECK_SECONDS, then twice as long
# each time up to CREATE_CHECK_MAX_SECONDS. A controller that makes a thousand jobs' pods for
# minutes costs a few looks a job, not one every 10 s.
CREATE_GRACE_SECONDS = 10.0
CREATE_CHECK_SECONDS = 10.0
CREATE_CHECK_MAX_SECONDS = 60.0
# One list of a namespace's FailedCreate events serves every job there that looks within this
# many seconds: 1000 jobs waiting on a slow controller cost one list, not 1000.
FAILED_CREATE_SHARED_SECONDS = 2.0


def pace(looks: int) -> float:
    """Seconds from a job's last look to its next, after `looks` looks: 10, 20, 40, 60..."""
    return min(CREATE_CHECK_SECONDS * 2.0 ** max(looks - 1, 0), CREATE_CHECK_MAX_SECONDS)


@dataclass(frozen=True)
class SharedList:
    """One list of a namespace's FailedCreate events, by StatefulSet (name, uid): it serves
    every job there that looks within FAILED_CREATE_SHARED_SECONDS of `started`."""

    started: float
    messages: asyncio.Future[dict[tuple[str, str], str]]


@dataclass
class FailedCreates:
    """The FailedCreate checks of every job: each job's own pace is in its `JobState`."""

    kube: Kube
    # The reconciler's clock: seconds that only ever go forward.
    clock: Callable[[], float]
    # Across the jobs of a namespace: its latest FailedCreate list, by namespace.
    lists: dict[str, SharedList] = field(default_factory=dict)

    async def check(
        self,
        job: JobState,
        key: JobKey,
        view: JobView,
        pods: list[PodObservation],
        sets: list[StatefulSetObservation],
    ) -> tuple[dict[str, str], float | None]:
        """FailedCreate messages of the job's StatefulSets that lack pods, and when to look
        again.

        A StatefulSet lacks pods for a moment after it is made or scaled up; only one that
        still lacks them after a grace period is looked at, at most every few seconds per
        job: a healthy job costs no call.
        """
        short = lacking(key[1], sets, pods) if view.spec is not None else []
        if not short:
            job.create_check = None
            return {}, None
        now = self.clock()
        if job.create_check is None:
            job.create_check = CreateCheck(since=now, failures={})
        check = job.create_check
        due = max(check.since + CREATE_GRACE_SECONDS, (check.checked_at or 0.0) + pace(check.looks))
        if now < due:
            return check.failures, due - now
        listed = await self._namespace(key[0])
        failures = {c.name: listed[(c.name, c.uid)] for c in short if (c.name, c.uid) in listed}
        looks = check.looks + 1
        job.create_check = CreateCheck(check.since, failures, checked_at=now, looks=looks)
        return failures, pace(looks)

    async def _namespace(self, namespace: str) -> dict[tuple[str, str], str]:
        """The namespace's FailedCreate messages by StatefulSet, from one list shared by every
        job of the namespace that looks within a moment (a list under way included)."""
        now = self.clock()
        shared = self.lists.get(namespace)
        if shared is not None and now - shared.started < FAILED_CREATE_SHARED_SECONDS:
            future = shared.messages
            failed = future.done() and (future.cancelled() or future.exception() is not None)
            if not failed:
                return await asyncio.shield(future)
        task = asyncio.ensure_future(asyncio.to_thread(self.kube.failed_creates, namespace))
        self.lists[namespace] = SharedList(now, task)
        return await asyncio.shield(task)
