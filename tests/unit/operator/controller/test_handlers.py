"""kopf's handlers. Every kind of child the operator makes is one it watches, through its label
selector: one deleted by someone else wakes its job, which makes it again, even when the
deletion comes in the middle of a reconcile (test_reconcile.py here; on the API server,
tests/integration/test_operator.py and test_gang_podgroups.py). And no handler runs on a clock,
which keeps the operator's API requests few."""

from __future__ import annotations

import asyncio
import contextvars
import copy
from datetime import UTC, datetime
from typing import Any

import kopf
import pytest

from tfjob_operator.controller import handlers
from tfjob_operator.rules import naming
from tfjob_operator.rules.gang import Gang, Scheduler
from tfjob_operator.rules.lifecycle import JobView, decide
from tfjob_testbed.core.jobs import pod, tfjob

NOW = datetime(2026, 11, 24, tzinfo=UTC)
GANGS = [None, *(Gang(s) for s in Scheduler)]
KEY = ("team-a", "mnist")
INDEXES = {"tfjobs": {}}  # kopf's, as handlers get them


def every_child(gang: Gang | None) -> list[dict]:
    """What a job with every optional child (checkpoint claim, TensorBoard, PodGroup) gets."""
    body = tfjob(
        replicas={"Chief": 1, "PS": 1, "Worker": 2},
        checkpoint={"storage": {"size": "1Gi"}},
        tensorboard={},
    )
    return decide(JobView.from_body(body), [], NOW, "cluster.local", gang=gang).children


def resource(child: dict) -> tuple[str, str, str]:
    group, _, version = child["apiVersion"].rpartition("/")
    return group, version, child["kind"].lower() + "s"


@pytest.mark.parametrize("gang", GANGS, ids=lambda g: g.scheduler.value if g else "no-gang")
def test_every_kind_of_child_is_watched_and_carries_the_selector_label(gang):
    children = every_child(gang)
    kinds = {c["kind"] for c in children}
    assert {"PersistentVolumeClaim", "Service", "StatefulSet", "Deployment"} <= kinds
    assert ("PodGroup" in kinds) == (gang is not None)
    for child in children:
        assert resource(child) in handlers.watched(gang), f"{child['kind']} is not watched"
        labels = child["metadata"]["labels"]
        assert handlers.OURS.items() <= labels.items(), f"{child['kind']} escapes the selector"


def test_pod_groups_are_watched_only_for_the_scheduler_in_use():
    assert handlers.watched(None) == handlers.OWNED
    assert not [r for r in handlers.OWNED if r[2] == "podgroups"]
    for scheduler in Scheduler:
        extra = [r for r in handlers.watched(Gang(scheduler)) if r not in handlers.OWNED]
        assert extra == scheduler.kinds and scheduler.api in extra


class Forgetting:
    """Stands in for the Reconciler where a deletion meets it."""

    def __init__(self) -> None:
        self.forgotten: list[tuple[str, str]] = []
        self.jobs = self.pods = self.statefulsets = {}

    def forget_children(self, key) -> None:
        self.forgotten.append(key)

    def start_first_pass(self) -> None:
        pass


class Queue:
    def __init__(self) -> None:
        self.scheduled: list[tuple[str, str]] = []

    def schedule(self, key) -> None:
        self.scheduled.append(key)


def deleted(memo: kopf.Memo, plural: str, body: dict[str, Any] | None = None) -> None:
    """One DELETED event of a child of the job KEY, as the children's watches hand it on."""
    handlers._child_event(memo, plural, "DELETED", KEY, body or {"metadata": {}})


def memo_of(reconciler: Any, elector: Any = None) -> kopf.Memo:
    """What the handlers share, after a first TFJob event gave them a context to run in."""
    memo = kopf.Memo(reconciler=reconciler, elector=elector, queue=Queue())
    memo.shared = handlers._Shared(handler_context=contextvars.copy_context())
    return memo


def test_a_deleted_child_makes_the_leader_apply_its_job_again():
    """The deletion forgets what was applied and wakes the job; whether a reconcile is under
    way then is the reconciler's to handle (tests/unit/operator/controller/test_reconcile.py)."""
    reconciler = Forgetting()
    memo = memo_of(reconciler)
    deleted(memo, "services")
    assert reconciler.forgotten == [KEY]
    assert memo.queue.scheduled == [KEY]


def test_a_deleted_pod_is_handed_to_the_leader_as_it_last_was():
    """A stopped pod's exit may come in its deletion only: its last state goes to the
    reconciler (`Reconciler.pod_deleted`, test_reconcile.py); a standby keeps none."""
    seen = []

    class Keeping(Forgetting):
        def pod_deleted(self, key, body) -> None:
            seen.append((key, body["metadata"]["name"]))

    for leading in (True, False):
        elector = None if leading else type("Standby", (), {"leading": False})()
        deleted(memo_of(Keeping(), elector), "pods", {"metadata": {"name": "mnist-worker-0"}})
    assert seen == [(KEY, "mnist-worker-0")]


def test_a_deleted_pod_group_wakes_its_job_through_kopf():
    """PodGroups (a gang scheduler's CRD, which may come after the operator) stay with kopf."""
    reconciler = Forgetting()
    memo = memo_of(reconciler)
    labels = {naming.LABEL_JOB_NAME: KEY[1], **handlers.OURS}
    asyncio.run(
        handlers.owned_event(type="DELETED", namespace=KEY[0], labels=labels, memo=memo, **INDEXES)
    )
    assert reconciler.forgotten == [KEY]
    assert memo.queue.scheduled == [KEY]


def test_no_kopf_handler_runs_on_a_clock_or_writes_progress():
    """Timers, daemons and resumable change handlers would cost requests per job while it
    idles (or annotations on every change): the operator only reacts to events."""
    handlers.register()
    registry = kopf.get_default_registry()
    assert not list(registry._spawning.get_all_handlers()), "timers or daemons"
    assert not list(registry._changing.get_all_handlers()), "on.create/update/delete handlers"


def test_a_held_pod_of_a_job_not_known_is_let_go_without_a_handlers_context():
    """No TFJob event yet (the job was deleted while the operator was away): a pod of ours
    being deleted that our finalizer holds is handed to `Reconciler.let_go` all the same, once
    the children are listed; any other pod event waits for its job's."""
    let_go: list[tuple[str, str]] = []

    class Releasing(Forgetting):
        kube = type("Kube", (), {"group": "tfjob.dev"})()

        def pod_deleted(self, key, body) -> None:
            pass

        async def let_go(self, key) -> None:
            let_go.append(key)

    class Watches:
        listed = asyncio.Event()

    held = pod(KEY[1], "worker", 0, finalizers=["tfjob.dev/task-ended"])
    held["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    held["metadata"]["labels"][naming.LABEL_JOB_NAME] = KEY[1]

    async def events() -> None:
        memo = kopf.Memo(reconciler=Releasing(), elector=None, queue=Queue(), watches=Watches())
        memo.shared = handlers._Shared()  # no handler has run
        Watches.listed.set()
        handlers._child_event(memo, "pods", "MODIFIED", KEY, pod(KEY[1], "worker", 1))
        other = copy.deepcopy(held)  # held by the operator of Kubeflow's group: its own
        other["metadata"]["finalizers"] = ["kubeflow.org/task-ended"]
        handlers._child_event(memo, "pods", "MODIFIED", KEY, other)
        handlers._child_event(memo, "pods", "MODIFIED", KEY, held)
        await asyncio.gather(*handlers._letting_go)
        assert memo.queue.scheduled == []

    asyncio.run(events())
    assert let_go == [KEY]
