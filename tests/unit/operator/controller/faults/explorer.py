"""The fault explorer: one scenario of a job's life run by the real `Reconciler` on the
simulated cluster (`sim.World`), once without faults and once for each fault at each API call
of that run, each to quiescence; the outcome of every faulted run must be the fault-free one's.

Between two ticks of the cluster the operator runs until it settles (a reconcile that writes
nothing), as a work queue retries it: after an error it runs again, after a crash or a lost
Lease a new process with an empty memory takes over. So every fault is met and healed within
the tick it struck in, and the cluster moves on as it would have: any difference in the end is
the operator's doing."""

from __future__ import annotations

import asyncio
import copy
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import kopf

from tests.unit.operator.controller.faults.sim import WRITES, Crash, Fault, Script, SimKube, World
from tfjob_operator.controller.jobstate import JobKey
from tfjob_operator.controller.projections import job_record
from tfjob_operator.controller.reconcile import Reconciler
from tfjob_operator.rules import status as st
from tfjob_operator.rules.gang import Gang
from tfjob_operator.rules.kueue.queue import Queueing
from tfjob_operator.rules.pods import observe
from tfjob_operator.rules.statefulsets import observe_statefulset

# Reconciles in one tick before the operator is taken not to settle.
SETTLE_LIMIT = 40
# Status fields whose values are clocks or names the cluster makes up.
UNSTABLE = re.compile(r"[Tt]ime$|^podUIDs$")


@dataclass(frozen=True)
class Scenario:
    """A job's life: its TFJob, each task's script, and what happens at which tick: a change
    of the stored TFJob, "remake" (deleted and made again under its name), "lose <pod>"
    (that pod's node stops answering), "evict" (Kueue preempts the job's Workload), "delete"
    (the TFJob deleted) and "collect" (the garbage collector deletes its children, later)."""

    name: str
    job: dict[str, Any]
    scripts: dict[tuple[str, int], Script] = field(default_factory=dict)
    edits: dict[int, Callable[[dict[str, Any]], None] | str] = field(default_factory=dict)
    ticks: int = 12
    expect: str = "Succeeded"  # the fault-free run's end: a terminal state, or "Deleted"
    gang: Gang | None = None  # the operator's gang scheduler
    rules: bool = False  # the API server keeps container restart rules


@dataclass(frozen=True)
class Outcome:
    """What a run leaves, everything a fault must not change: the job's terminal state and
    status (but clocks), each task's starts (from step 0 and from a save), the pods the
    operator deleted, and the rules a run broke on the way (`violations`)."""

    state: str
    status: Any
    starts: tuple[tuple[tuple[str, int], int], ...]
    fresh_starts: tuple[tuple[tuple[str, int], int], ...]
    deleted: tuple[tuple[tuple[str, int], int], ...]
    events: frozenset[str]
    violations: tuple[str, ...]


@dataclass
class Run:
    outcome: Outcome
    calls: list[tuple[str, str]]
    struck: bool


def _stable(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in sorted(value.items()) if not UNSTABLE.search(k)}
    if isinstance(value, list):
        return [_stable(v) for v in value]
    return value


class Operator:
    """The operator's process on the simulated cluster: a `Reconciler` with kopf's indexes
    filled from the world, made anew after a crash."""

    def __init__(
        self,
        world: World,
        kube: SimKube,
        key: JobKey,
        gang: Gang | None = None,
        rules: bool = False,
    ) -> None:
        self.world, self.kube, self.key, self.gang, self.rules = world, kube, key, gang, rules
        self.jobs: dict[JobKey, list[dict[str, Any]]] = {}
        self.pods: dict[JobKey, list[Any]] = {}
        self.sets: dict[JobKey, list[Any]] = {}
        self.loop = asyncio.new_event_loop()
        self.violations: list[str] = []
        self.start()

    def start(self) -> None:
        self.reconciler = Reconciler(
            self.kube,  # type: ignore[arg-type]
            "cluster.local",
            jobs=self.jobs,
            pods=self.pods,
            statefulsets=self.sets,
            clock=lambda: float(self.world.rv),
            gang=self.gang,
            queueing=Queueing(),
            restart_rules=self.rules,
        )

    def close(self) -> None:
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()

    def index(self) -> None:
        """The watches bring the cluster as it is into the indexes."""
        ns, name = self.key
        body = self.world.jobs.get(name)
        if body is None:
            self.jobs.pop(self.key, None)
        else:
            self.jobs[self.key] = [job_record(copy.deepcopy(body))]
        pods = [observe(p.body(ns)) for p in self.world.pods.values()]
        self.pods[self.key] = [p for p in pods if p is not None and p.name.startswith(name)]
        sets = [observe_statefulset(s.body(ns)) for s in self.world.sets.values()]
        self.sets[self.key] = [s for s in sets if s is not None]
        for gone in self.world.gone:
            self.reconciler.pod_deleted(self.key, gone)
        self.world.gone.clear()
        for wl in self.world.workloads.values():
            self.reconciler.workload_seen(self.key, copy.deepcopy(wl), False)
        for wl in self.world.workloads_gone:
            self.reconciler.workload_seen(self.key, wl, True)
        self.world.workloads_gone.clear()

    def settle(self) -> None:
        for _ in range(SETTLE_LIMIT):
            self.index()
            before = len(self.kube.calls)
            try:
                self.loop.run_until_complete(self.reconciler(self.key))
            except Crash:
                self.start()
                continue
            except Exception:
                continue  # the work queue retries it
            if not self.kube.leading:  # the Lease is lost: the process exits, another leads
                self.kube.leading = True
                self.start()
                continue
            if not any(c[0] in WRITES for c in self.kube.calls[before:]):
                return
        self.violations.append(f"never settled within {SETTLE_LIMIT} reconciles")


def run(scenario: Scenario, fault: Fault | None = None) -> Run:
    """The scenario to its end, with the fault if any."""
    world = World(scripts=dict(scenario.scripts))
    kube = SimKube(world, fault)
    name = scenario.job["metadata"]["name"]
    key = (world.namespace, name)
    events: list[str] = []
    collect = ""
    previous = kopf.event

    def event(body: Any, *, type: str, reason: str, message: str) -> None:
        events.append(reason)

    kopf.event = event  # type: ignore[assignment]
    op = Operator(world, kube, key, scenario.gang, scenario.rules)
    try:
        _create(world, scenario.job)
        for tick in range(scenario.ticks):
            edit = scenario.edits.get(tick)
            if edit == "remake":
                old = world.jobs.pop(name)
                world.collect(old["metadata"]["uid"])
                _create(world, scenario.job)
            elif edit == "delete":  # the garbage collector comes a tick later
                collect = world.jobs.pop(name)["metadata"]["uid"]
            elif edit == "collect":
                world.collect(collect)
            elif edit == "evict":
                world.evict()
            elif isinstance(edit, str):
                world.lose(edit.removeprefix("lose "))
            elif edit is not None:
                job = world.jobs[name]
                edit(job["spec"])  # type: ignore[operator]
                job["metadata"]["generation"] += 1
                job["metadata"]["resourceVersion"] = world.next_rv()
            op.settle()
            world.tick()
        op.settle()
    finally:
        kopf.event = previous  # type: ignore[assignment]
        op.close()
    body = world.jobs.get(name)
    status = (body or {}).get("status") or {}
    state = "Deleted" if body is None else st.state(status)
    outcome = Outcome(
        state=state,
        status=_stable(status),
        starts=tuple(sorted(world.starts.items())),
        fresh_starts=tuple(sorted(world.fresh_starts.items())),
        deleted=tuple(sorted(Counter(world.deleted).items())),
        events=frozenset(events),
        violations=tuple(op.violations + world.violations),
    )
    return Run(outcome, list(kube.calls), kube.struck)


def _create(world: World, job: dict[str, Any]) -> None:
    body = copy.deepcopy(job)
    body["metadata"].update(uid=world.uid("tfjob"), generation=1, resourceVersion=world.next_rv())
    world.jobs[body["metadata"]["name"]] = body


def differences(expected: Outcome, got: Outcome) -> list[str]:
    """What differs between two outcomes, field by field (empty: the same)."""
    out = [
        f"{f}: {getattr(expected, f)!r} != {getattr(got, f)!r}"
        for f in ("state", "status", "starts", "fresh_starts", "deleted")
        if getattr(expected, f) != getattr(got, f)
    ]
    if not expected.events <= got.events:
        out.append(f"events lost: {sorted(expected.events - got.events)}")
    out += [f"violation: {v}" for v in got.violations]
    return out


def explore(scenario: Scenario, kinds: Sequence[str] = Fault.KINDS) -> tuple[int, list[str]]:
    """Every fault of `kinds` at every call of the scenario's fault-free run: (cases run,
    differences)."""
    clean = run(scenario)
    found = [f"fault-free: {v}" for v in clean.outcome.violations]
    if clean.outcome.state != scenario.expect:
        found.append(f"fault-free: ends {clean.outcome.state}, not {scenario.expect}")
    cases = 0
    for at in range(len(clean.calls)):
        for kind in kinds:
            faulted = run(scenario, Fault(kind, at))
            cases += 1
            for d in differences(clean.outcome, faulted.outcome):
                found.append(f"{kind} at call {at} {clean.calls[at]}: {d}")
    return cases, found
