"""Every fault at every API call of a job's life ends the job as the fault-free run does
(`explorer`); the matrix's size per scenario is the one `docs/faults.md` states."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.operator.controller.faults.explorer import (
    Operator,
    Outcome,
    Scenario,
    _create,
    differences,
    explore,
    run,
)
from tests.unit.operator.controller.faults.scenarios import SCENARIOS
from tests.unit.operator.controller.faults.sim import Fault, SimKube, World, exits
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.paths import ROOT

DOC = ROOT / "docs" / "faults.md"


def documented() -> dict[str, tuple[int, int]]:
    """(calls, cases) of each scenario, as the docs' matrix says."""
    rows = re.findall(r"^\| `([\w-]+)` \| (\d+) \| (\d+) \| 0 \|$", DOC.read_text(), re.M)
    return {name: (int(calls), int(cases)) for name, calls, cases in rows}


@pytest.mark.parametrize("kind", Fault.KINDS)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_fault_at_every_call_ends_the_job_as_without_faults(scenario: Scenario, kind: str):
    calls, found = explore(scenario, (kind,))
    assert found == [], "\n".join(found[:20])
    assert documented().get(scenario.name) == (calls, calls * len(Fault.KINDS)), (
        f"update {DOC.name}'s matrix"
    )


def test_the_docs_list_every_scenario_once():
    assert sorted(documented()) == sorted(s.name for s in SCENARIOS)


def test_a_fault_that_changes_the_outcome_is_found():
    """The explorer can fail: a run whose outcome differs in any field is reported."""
    base = Outcome("Succeeded", {}, ((("chief", 0), 1),), (), (), frozenset({"A"}), ())
    assert differences(base, base) == []
    for changed in (
        base.__class__("Failed", {}, base.starts, (), (), base.events, ()),
        base.__class__(base.state, {}, ((("chief", 0), 2),), (), (), base.events, ()),
        base.__class__(base.state, {}, base.starts, (), (), frozenset(), ()),
        base.__class__(base.state, {}, base.starts, (), (), base.events, ("x",)),
    ):
        assert differences(base, changed)


def test_a_success_whose_status_write_is_lost_is_not_trained_again():
    """The operator crashes right after the write that stores Succeeded, or the write's
    answer is lost: the chief that decided it is not started again from step 0."""
    job = Scenario("s", tfjob("one", replicas={"Chief": 1}), {("chief", 0): exits(0, after=2)})
    clean = run(job)
    assert clean.outcome.state == "Succeeded"
    write = max(i for i, c in enumerate(clean.calls) if c[0] == "patch_status")
    for kind in ("crash-after", "timeout", "500", "crash-before"):
        faulted = run(job, Fault(kind, write))
        assert faulted.struck
        assert faulted.outcome.state == "Succeeded"
        assert faulted.outcome.fresh_starts == clean.outcome.fresh_starts == ((("chief", 0), 1),)


def test_an_ended_task_made_again_is_found(monkeypatch):
    """Where restart rules are kept, the explorer sees a task started again after its exit
    ended it: the pods made without the operator's finalizer, worker 0's done pod is made
    again by its StatefulSet while worker 1 runs on."""
    scenario = next(s for s in SCENARIOS if s.name == "all-workers-succeed-rules")
    assert run(scenario).outcome.violations == ()
    make = World._make_pod

    def unheld(self: World, *args: Any) -> None:
        make(self, *args)
        for p in self.pods.values():
            p.finalizers = []

    monkeypatch.setattr(World, "_make_pod", unheld)
    assert run(scenario).outcome.violations == ("('worker', 0) started again after its task ended",)


def test_a_deleted_jobs_held_pod_is_let_go_once_its_statefulset_wants_none():
    """The TFJob gone while the garbage collector has yet to delete its StatefulSet: the
    operator scales that StatefulSet to 0 before it lets the held pod go, so that no pod is
    made again in between (the sim's StatefulSet controller would make it at the next tick)."""
    job = tfjob("gone", replicas={"Worker": 2}, run_policy={"cleanPodPolicy": "None"})
    scenario = Scenario("s", job, {("worker", 0): exits(0, after=1)}, rules=True, ticks=3)
    world = World(scripts=dict(scenario.scripts))
    kube = SimKube(world)
    op = Operator(world, kube, (world.namespace, "gone"), rules=True)
    try:
        _create(world, job)
        for _ in range(3):
            op.settle()
            world.tick()
        held = world.pods["gone-worker-0"]
        assert held.deleting and held.finalizers, "worker 0's done pod is held"
        del world.jobs["gone"]  # the StatefulSets stay: the garbage collector comes later
        op.index()
        before = len(kube.calls)
        op.loop.run_until_complete(op.reconciler.let_go(op.key, gone=True))
        assert kube.calls[before:] == [
            ("scale_to_zero", "gone-worker"),
            ("release_pod", "gone-worker-0"),
        ]
        world.tick()
        assert "gone-worker-0" not in world.pods and world.violations == []
    finally:
        op.close()
