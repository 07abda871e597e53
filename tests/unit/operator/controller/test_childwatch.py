"""The children's watches (`childwatch.py`): what they keep of each child, which events wake a
job, what a new list tells, and which namespaces count. The streams themselves are kopf's and
run against the API server in tests/integration (test_operator.py makes a deleted child again)."""

from __future__ import annotations

import asyncio

import pytest

from tfjob_operator.controller.childwatch import ChildWatches
from tfjob_operator.controller.handlers import CHILDREN
from tfjob_testbed.core.jobs import pod

KINDS = {k.plural: k for k in CHILDREN}
KEY = ("default", "mnist")


def service(uid: str = "svc-1", namespace: str = "default") -> dict:
    labels = {"tfjob.dev/job-name": "mnist", "app.kubernetes.io/managed-by": "tfjob-operator"}
    return {
        "metadata": {"name": "mnist-worker", "namespace": namespace, "uid": uid, "labels": labels}
    }


def watches(namespaces: tuple[str, ...] = ()) -> tuple[ChildWatches, list[tuple[str, str]]]:
    heard: list[tuple[str, str]] = []
    w = ChildWatches(CHILDREN, lambda plural, type_, key, body: heard.append((plural, type_)),
                     namespaces)  # fmt: skip
    return w, heard


def test_a_pod_wakes_its_job_only_when_what_the_rules_read_changes():
    w, heard = watches()
    w.handle(KINDS["pods"], "ADDED", pod("mnist", "worker", 0))
    running = pod("mnist", "worker", 0)
    running["status"]["podIP"] = "10.0.0.9"  # not read by the rules
    w.handle(KINDS["pods"], "MODIFIED", running)
    w.handle(KINDS["pods"], "MODIFIED", pod("mnist", "worker", 0, state="terminated", exit_code=1))
    assert heard == [("pods", "ADDED"), ("pods", "MODIFIED")]
    (kept,) = w.observations["pods"][KEY]
    assert kept.exit is not None and kept.exit.code == 1
    w.handle(KINDS["pods"], "DELETED", pod("mnist", "worker", 0))
    assert heard[-1] == ("pods", "DELETED"), "a deletion always wakes"
    assert KEY not in w.observations["pods"], "and is forgotten"


def test_children_the_rules_do_not_read_wake_their_job_only_when_deleted():
    w, heard = watches()
    w.handle(KINDS["services"], None, service())
    w.handle(KINDS["services"], "MODIFIED", service())
    assert heard == []
    w.handle(KINDS["services"], "DELETED", service())
    assert heard == [("services", "DELETED")]


def test_a_new_list_that_no_longer_shows_a_child_tells_of_its_deletion():
    """After 410 Gone, kopf lists again: what was deleted in between sends no event."""
    w, heard = watches()
    w.handle(KINDS["services"], None, service("svc-1"))
    w.handle(KINDS["services"], None, service("svc-2"))
    w._waiting = {("services", None)}
    w._listed(KINDS["services"], None, {"svc-2"})
    assert heard == [("services", "DELETED")]
    assert w.listed.is_set()
    w._listed(KINDS["services"], None, {"svc-2"})
    assert heard == [("services", "DELETED")], "told once"


def test_a_namespaced_list_only_judges_its_own_namespace():
    w, heard = watches(("team-a", "team-b"))
    w.handle(KINDS["services"], None, service("a", "team-a"))
    w.handle(KINDS["services"], None, service("b", "team-b"))
    w._listed(KINDS["services"], "team-a", {"a"})
    assert heard == []


@pytest.mark.parametrize(
    ("namespaces", "scopes"),
    [((), [None]), (("team-a", "team-b"), ["team-a", "team-b"]), (("team-*",), [None])],
)
def test_named_namespaces_are_watched_each_and_globs_cluster_wide(namespaces, scopes):
    w, heard = watches(namespaces)
    assert w._scopes() == scopes
    w.handle(KINDS["services"], "DELETED", service("x", "other"))
    w.handle(KINDS["services"], "DELETED", service("y", "team-b"))
    assert len(heard) == (2 if not namespaces else 1), "another namespace is not ours"


def test_reconciles_wait_until_every_watch_has_listed():
    async def run() -> list[bool]:
        w, _ = watches(("team-a",))
        w._waiting = {(k.plural, "team-a") for k in CHILDREN}
        seen = [w.listed.is_set()]
        for kind in CHILDREN[:-1]:
            w._listed(kind, "team-a", set())
        seen.append(w.listed.is_set())
        w._listed(CHILDREN[-1], "team-a", set())
        await asyncio.wait_for(w.listed.wait(), 1)
        return [*seen, w.listed.is_set()]

    assert asyncio.run(run()) == [False, False, True]
