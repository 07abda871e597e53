"""One reconcile's decision for one job (`decide`): from the job as read and what was observed,
everything the operator should make true, with the rules applied in their order."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from tfjob_operator.api.spec import ReplicaType, TFJobSpec
from tfjob_operator.rules import status as st
from tfjob_operator.rules.children import Built, JobRef, Manifest, build, spec_hash
from tfjob_operator.rules.gang import Gang, ignored_fields, joined
from tfjob_operator.rules.kueue.admission import Placement
from tfjob_operator.rules.kueue.queue import QueueView
from tfjob_operator.rules.kueue.workload import WorkloadDecision
from tfjob_operator.rules.lifecycle.change import Change, Condition, apply, put
from tfjob_operator.rules.lifecycle.ended import releases, restart_policies, settled
from tfjob_operator.rules.lifecycle.exits import (
    account_exits,
    account_losses,
    record,
    replica_counts,
)
from tfjob_operator.rules.lifecycle.limits import after_finish
from tfjob_operator.rules.lifecycle.observation import Observation, replica_pods, surplus_pods
from tfjob_operator.rules.lifecycle.owned import owned, tensorboard_status
from tfjob_operator.rules.lifecycle.progress import advance
from tfjob_operator.rules.lifecycle.restart import restart, restarting
from tfjob_operator.rules.lifecycle.stops import last_stop, stop_events, taking
from tfjob_operator.rules.lifecycle.suspension import (
    admission,
    resumed,
    stopped,
    wanted_workload,
    workload_decision,
)
from tfjob_operator.rules.lifecycle.together import REASON as WITH_PS
from tfjob_operator.rules.lifecycle.together import with_parameter_server
from tfjob_operator.rules.lifecycle.view import FINAL, JobView
from tfjob_operator.rules.lifecycle.waiting import waiting, waiting_events, waiting_for_kueue
from tfjob_operator.rules.pods import PodObservation
from tfjob_operator.rules.statefulsets import StatefulSetObservation


@dataclass
class Decision:
    """Everything the operator should make true for one job, in one go."""

    status: st.Status
    children: list[Manifest] = field(default_factory=list)
    # Owned objects to delete (kind, name): the StatefulSet and Service of a replica type that
    # left the spec.
    delete_children: list[tuple[str, str]] = field(default_factory=list)
    # StatefulSets to scale to 0: a finished job's, read from what exists (its spec may be bad).
    scale_down: list[str] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    delete_job: bool = False
    requeue_after: float | None = None
    # The merge patch from the stored status to `status`; empty when nothing changed.
    patch: dict[str, Any] = field(default_factory=dict)
    # Pods that lack their own Kubeflow labels: (name, uid, labels to add).
    label_pods: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    # Pods to delete at once, (name, uid): lost with their node (`nodelost`).
    delete_pods: list[tuple[str, str]] = field(default_factory=list)
    # The job's Kueue Workload: made, replaced or its status written (`rules/kueue/`).
    workload: WorkloadDecision | None = None
    # Pods to delete together, (name, uid): off their StatefulSet's current revision, so that
    # the job's tasks restart at once with the new template (`restart`); or still running as
    # a parameter server goes, so that the job stops with it (`together`).
    restart_pods: list[tuple[str, str]] = field(default_factory=list)
    # Pods of a finished job whose task is done, (name, uid): deleted with a short grace
    # period (`limits.done_pods`).
    done_pods: list[tuple[str, str]] = field(default_factory=list)
    # Pods being deleted that the operator's finalizer no longer holds, (name, uid): let go
    # (`ended.releases`).
    release_pods: list[tuple[str, str]] = field(default_factory=list)


def finish(prior: st.Status, status: st.Status) -> Decision:
    """The decision that writes `status` over `prior` and announces its new conditions."""
    events = [
        (
            "Warning" if c.get("reason") in st.WARNING_REASONS else "Normal",
            c.get("reason", c["type"]),
            c.get("message", ""),
        )
        for c in st.announced(prior, status)
    ]
    return Decision(status=status, events=events, patch=st.merge_patch(prior, status))


def decide(
    job: JobView,
    observed: Iterable[PodObservation],
    now: datetime,
    cluster_domain: str,
    *,
    statefulsets: Sequence[StatefulSetObservation] = (),
    create_failures: Mapping[str, str] | None = None,
    error: str | None = None,
    gang: Gang | None = None,
    queue: QueueView | None = None,
    departed: Iterable[PodObservation] = (),
    applied: Mapping[str, int] | None = None,
    restart_rules: bool = False,
) -> Decision:
    """Compute the job's next status, its children and the side effects, from what is seen.

    `statefulsets` are the owned ones that exist; `create_failures` the latest FailedCreate
    message of each StatefulSet that lacks pods; `error` a reconcile failure that persists;
    `gang` the operator's gang scheduler, if any; `queue` the job's place in Kueue, for a
    job that waits in a LocalQueue; `departed` pods deleted since, as they last were;
    `applied` each StatefulSet's generation as the operator last applied it;
    `restart_rules` whether the API server keeps container restart rules.
    """
    raw = tuple(observed)
    policies = restart_policies(job.spec)
    observed = tuple(settled(p, policies) for p in raw)
    seen = Observation(
        pods=replica_pods(job.spec, observed),
        departed=replica_pods(job.spec, departed),
        now=now,
        cluster_domain=cluster_domain,
        statefulsets=statefulsets,
        create_failures=create_failures or {},
        error=error,
        gang=gang,
        queue=queue,
        surplus=surplus_pods(job.spec, observed),
        applied=applied or {},
        restart_rules=restart_rules,
    )
    status = copy.deepcopy(job.status)
    name = f"{job.ref.namespace}/{job.ref.name}"
    was_finished = st.is_finished(status)
    apply(status, _reconciled(status, seen.error, name), now)
    generation, news = _generation_news(job, status, was_finished, name, seen.gang)
    if generation is not None:
        status["observedGeneration"] = generation
    if job.spec is None and not was_finished and "replicaStatuses" in job.status:
        decision = _decide_held(job, status, now, name)
        decision.events = news + decision.events
        return decision  # nothing of it goes: it is not finished
    if job.spec is None:
        decision = _decide_invalid(job, status, was_finished, now)
    else:
        _accepted(status, now, name)
        decision = _decide_valid(job, job.spec, status, seen, name)
    decision.events = news + decision.events
    cleanup = after_finish(status, job.run_policy, seen.statefulsets, now, observed)
    decision.scale_down = list(cleanup.scale_down)
    decision.done_pods = list(cleanup.done)
    # As the StatefulSets stand once this decision's scale-down and deletions are done (the
    # reconcile lets go after them).
    going = {*decision.scale_down, *(name for kind, name in decision.delete_children)}
    after = [replace(s, replicas=0) if s.name in going else s for s in seen.statefulsets]
    group = job.ref.api_version.partition("/")[0]
    decision.release_pods = releases(raw, after, policies, group)
    decision.delete_job = cleanup.delete_job
    requeue = [decision.requeue_after] if decision.requeue_after is not None else []
    requeue += cleanup.requeue
    decision.requeue_after = min(requeue) if requeue else None
    return decision


def _reconciled(status: st.Status, error: str | None, name: str) -> Change:
    """What any reconcile says: the job is Created; a reconcile failure that persists is a
    condition, False once one succeeds; and a job that another controller started is handed
    over, since its pods and Services are gone once it is reconciled at all."""
    conditions = [Condition(st.Cond.CREATED, True, st.Reason.CREATED, f"TFJob {name} is created.")]
    if error is not None:
        conditions.append(
            Condition(
                st.Cond.RECONCILE_ERROR,
                True,
                st.Reason.RECONCILE_ERROR,
                f"The operator cannot reconcile TFJob {name}: {error}",
            )
        )
    elif st.is_true(status, st.Cond.RECONCILE_ERROR):
        conditions.append(
            Condition(
                st.Cond.RECONCILE_ERROR,
                False,
                st.Reason.RECONCILED,
                f"TFJob {name} is reconciled again.",
            )
        )
    if st.is_true(status, st.Cond.STARTED_ELSEWHERE):
        conditions.append(
            Condition(
                st.Cond.STARTED_ELSEWHERE,
                False,
                st.Reason.HANDED_OVER,
                f"TFJob {name}: no other controller's pods or Services remain; tfjob-operator "
                "runs it now.",
            )
        )
    return Change(tuple(conditions))


def _generation_news(
    job: JobView, status: st.Status, was_finished: bool, name: str, gang: Gang | None
) -> tuple[int | None, list[tuple[str, str, str]]]:
    """(generation to record, Events): the Events are owed once per spec generation, for what
    the operator changed in the spec as written, or, for a job that has finished, that the
    edit is not applied."""
    if job.generation is None or status.get("observedGeneration") == job.generation:
        return None, []
    if was_finished and "observedGeneration" in status:
        return job.generation, [
            (
                "Warning",
                st.Reason.SPEC_IGNORED,
                f"TFJob {name} has finished ({st.state(status)}); changes to its spec are not "
                "applied. Delete and re-create the TFJob to run the new spec.",
            )
        ]
    if was_finished:
        return job.generation, []
    unused = ignored_fields(gang, job.spec) if job.spec is not None else []
    return job.generation, [
        ("Warning", st.Reason.SPEC_ADJUSTED, w) for w in (*job.warnings, *unused)
    ]


def _decide_held(job: JobView, status: st.Status, now: datetime, name: str) -> Decision:
    """An edit made a job that ran a valid spec invalid: nothing of it is destroyed. Its
    children stay as last applied, its pods run on, and its status says why until another
    edit makes the spec valid again (then the job goes on with it)."""
    st.set_condition(
        status,
        st.Cond.SPEC_REJECTED,
        True,
        st.Reason.INVALID_EDIT,
        f"The last edit of TFJob {name} is invalid, and is not applied: "
        + "; ".join(job.problems)
        + ". The job runs on as before the edit; fix the spec with another edit.",
        now,
    )
    return finish(job.status, status)


def _accepted(status: st.Status, now: datetime, name: str) -> None:
    """A spec valid again after an invalid edit: said once."""
    if st.is_true(status, st.Cond.SPEC_REJECTED):
        st.set_condition(
            status,
            st.Cond.SPEC_REJECTED,
            False,
            st.Reason.SPEC_ACCEPTED,
            f"The spec of TFJob {name} is valid again, and applied.",
            now,
        )


def _decide_invalid(job: JobView, status: st.Status, was_finished: bool, now: datetime) -> Decision:
    """A job whose spec is invalid fails, for good; no pod of it waits for anything."""
    if not was_finished:
        st.set_condition(
            status,
            st.Cond.FAILED,
            True,
            st.Reason.INVALID_SPEC,
            "Invalid TFJob: " + "; ".join(job.problems) + ". " + FINAL,
            now,
        )
        status.setdefault("completionTime", st.timestamp(now))
    status.pop("waiting", None)
    return finish(job.status, status)


def _decide_valid(
    job: JobView, spec: TFJobSpec, status: st.Status, seen: Observation, name: str
) -> Decision:
    """The lifecycle of a job whose spec is valid: pods -> status, and its children."""
    prior = job.status
    templates = _templates(job, spec, seen)
    wanted = None if seen.queue is None else wanted_workload(templates(), seen.queue)
    held, places = admission(seen.queue, wanted)
    requeue: tuple[float, ...] = ()
    gone: tuple[PodObservation, ...] = ()
    if not st.is_finished(prior):
        requeue, gone = _run(job.ref, spec, status, seen, held, places, name)
    finished = st.is_finished(status)
    suspended = (spec.run_policy.suspend or held) and not finished
    requeue += _report(job, spec, status, seen, held, suspended)
    again = (
        None if finished or suspended else restart(job.ref.name, spec, seen, prior.get("lastStop"))
    )
    if again is not None:
        stopping = [p.uid for p in (*seen.pods, *seen.departed) if p.deleting]
        status["lastStop"] = again.stop(status.get("lastStop"), seen.now, stopping)
    running = not (finished or suspended) and again is None
    together = with_parameter_server(seen, _ours(job.ref.name, prior, seen)) if running else None
    joined: list[str] = []
    if together is not None:
        last = status.get("lastStop") or {}
        joined = [p.uid for p in together.pods if p.uid not in (last.get("podUIDs") or ())]
        if last:  # the parameter server's stop: the pods stopped with it join it
            status["lastStop"] = taking(last, (p.uid for p in together.pods))

    decision = finish(prior, status)
    decision.events += waiting_events(prior, status) + stop_events(prior, status, name)
    # Also once the job has failed over it: the pod holds its identity (and a GPU) still.
    decision.delete_pods = [(p.name, p.uid) for p in gone]
    own = owned(job.ref, spec, prior, seen, None if finished else templates(), suspended, places)
    decision.children, decision.delete_children = own.children, own.delete
    decision.label_pods = own.label_pods
    if again is not None:
        decision.restart_pods = [(p.name, p.uid) for p in again.pods]
        if _begun(prior.get("lastStop"), status["lastStop"]):
            decision.events.append(("Normal", again.cause, f"TFJob {name}: {again.message}."))
    if together is not None:
        decision.restart_pods = [(p.name, p.uid) for p in together.pods]
        if joined:
            decision.events.append(("Normal", WITH_PS, f"TFJob {name}: {together.message}."))
    if seen.queue is not None and wanted is not None:
        decision.workload = workload_decision(seen.queue, wanted, status, spec, seen, finished)
    decision.requeue_after = min(requeue) if requeue else None
    return decision


def _ours(job: str, prior: st.Status, seen: Observation) -> frozenset[str]:
    """The pods that the operator's own stops delete: a restart's, and those its last stop
    took."""
    taken = set((prior.get("lastStop") or {}).get("podUIDs") or ())
    mine = {p.name for p in (*seen.pods, *seen.departed) if p.uid in taken}
    return restarting(job, seen, prior.get("lastStop")) | mine


def _begun(before: Mapping[str, Any] | None, after: Mapping[str, Any]) -> bool:
    """Whether `after` is a stop begun since `before`, not the same one taking more pods."""
    return any((before or {}).get(k) != after.get(k) for k in ("cause", "message", "time"))


def _templates(job: JobView, spec: TFJobSpec, seen: Observation) -> Callable[[], Built]:
    """The job's pod templates, rendered at most once and only when asked for (a finished job
    outside Kueue needs none): the ones the spec check rendered serve when they were rendered
    for this cluster domain and gang."""
    gang = joined(seen.gang, seen.pods, lambda rt: spec_hash(job.ref, spec, rt))
    checked = job.built
    rules = seen.restart_rules
    if checked is not None and checked.serves(job.ref, spec, seen.cluster_domain, gang, rules):
        return lambda: checked
    return functools.cache(lambda: build(job.ref, spec, seen.cluster_domain, gang, rules))


def _run(
    ref: JobRef,
    spec: TFJobSpec,
    status: st.Status,
    seen: Observation,
    held: bool,
    places: dict[ReplicaType, Placement] | None,
    name: str,
) -> tuple[tuple[float, ...], tuple[PodObservation, ...]]:
    """A job not finished yet: why its pods stop, if they do, and its new exits counted; then
    it is stopped (suspended, or held by Kueue), or it runs: its lost pods counted, moved
    forward. (requeue, pods to delete)."""
    why = stopped(spec.run_policy.suspend, held, seen.queue, name)
    # A pod deleted for a restart ends as the restart makes it end, whatever its exit code.
    ending = restarting(ref.name, seen, status.get("lastStop"))
    put(status, "lastStop", last_stop(status, why, seen.pods + seen.departed, seen.now, ending))
    counted = [p for p in seen.pods if p.name not in ending]
    exits = account_exits(status.get("terminations", {}), counted, spec, stopped=why is not None)
    record(status, exits)
    if why is not None:
        apply(status, Change((why,)), seen.now)
        return (), ()
    apply(status, resumed(status, seen.queue, places, name, seen.now), seen.now)
    losses = account_losses(status["terminations"], seen.pods, spec, seen.now)
    record(status, losses)
    fatal, retryable = exits.fatal + losses.fatal, exits.retryable + losses.retryable
    step = advance(status, spec, seen, fatal, retryable, ref.name, name)
    apply(status, step, seen.now)
    return step.requeue, losses.gone


def _report(
    job: JobView, spec: TFJobSpec, status: st.Status, seen: Observation, held: bool, suspended: bool
) -> tuple[float, ...]:
    """The status beside the conditions: completion time, replica counts, waiting pods, the
    TensorBoard. Returns when to look again."""
    finished = st.is_finished(status)
    if finished:
        status.setdefault("completionTime", st.timestamp(seen.now))
    status.update(replica_counts(status, seen.pods, spec, frozen=st.is_finished(job.status)))
    waits = waiting(spec, job.ref.name, seen, finished, suspended)
    put(status, "waiting", waits.pods or None)
    # A job its spec suspends waits for its user, not for Kueue, as without Kueue.
    if held and not finished and not spec.run_policy.suspend and seen.queue is not None:
        status["waiting"] = waiting_for_kueue(spec, job.ref.name, seen.queue)
    put(status, "tensorboard", tensorboard_status(job.ref, spec, seen.cluster_domain))
    return waits.requeue
