"""Every kind of child the operator makes is one it watches, through its label selector: one
deleted by someone else wakes its job, which makes it again (tests/integration/test_operator.py
and test_gang.py show it on the API server)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tfjob_operator.controller import handlers
from tfjob_operator.rules.gang import Gang, Scheduler
from tfjob_operator.rules.lifecycle import JobView, decide
from tfjob_testbed.jobs import tfjob

NOW = datetime(2026, 11, 24, tzinfo=UTC)
GANGS = [None, *(Gang(s) for s in Scheduler)]


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
        assert extra == [scheduler.api]
