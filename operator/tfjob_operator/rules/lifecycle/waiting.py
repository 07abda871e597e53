"""Pods that cannot start, and why: a job stuck on a bad image, an unschedulable GPU request, a
scheduler that is not running, a lost node, a pod Kubernetes refuses to create or a queue says
so in its own status (`status.waiting`) instead of staying Created in silence."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tfjob_operator.api.spec import TFJobSpec
from tfjob_operator.rules import naming, nodelost
from tfjob_operator.rules import status as st
from tfjob_operator.rules.children import mounts_checkpoint
from tfjob_operator.rules.kueue.messages import QUEUED, pods_of, waiting_message
from tfjob_operator.rules.kueue.queue import QueueView
from tfjob_operator.rules.lifecycle.observation import Observation
from tfjob_operator.rules.pods import PodObservation, Stuck

# A pod waits this long for a scheduler of its own before the job says it may not be running.
SCHEDULER_GRACE_SECONDS = 30.0


@dataclass(frozen=True)
class Waiting:
    """`status.waiting` (pod -> why; empty: none waits), and when to look again (seconds): when
    a lost node's pods are due, or a scheduler's grace runs out."""

    pods: dict[str, str]
    requeue: tuple[float, ...] = ()


def waiting(
    spec: TFJobSpec, job: str, seen: Observation, finished: bool, suspended: bool
) -> Waiting:
    """Why each pod that cannot start waits; nothing once the job has finished. A suspended
    job's missing pods are not missing."""
    node_lost_timeout = spec.run_policy.node_lost_timeout_seconds
    claim_hint = nodelost.claim_hint(job, spec)
    stuck: dict[str, Stuck] = {}
    requeue: list[float] = []
    for p in seen.pods:
        if p.lost_since is not None:
            stuck[p.name] = Stuck(
                nodelost.REASON, nodelost.message(p.node, p.lost_since, node_lost_timeout)
            )
            due = nodelost.deadline(p.lost_since, node_lost_timeout)
            if due is not None and due > seen.now:
                requeue.append((due - seen.now).total_seconds() + 0.5)
            continue
        why = p.stuck or p.scheduler_missing(seen.now, SCHEDULER_GRACE_SECONDS)
        conflict = nodelost.volume_conflict(why.message) if why is not None else None
        if why is not None and conflict and claim_hint and mounts_checkpoint(p.replica_type):
            # Instead of the scheduler's message, which the status' length limit would cut.
            why = Stuck(why.reason, f"{claim_hint} (the scheduler: {conflict})")
        if why is not None:
            stuck[p.name] = why
        elif p.unscheduled_by is not None and p.created is not None:
            # No event will come from a scheduler that is not there: look again at the grace.
            waited = (seen.now - p.created).total_seconds()
            requeue.append(max(SCHEDULER_GRACE_SECONDS - waited, 0.0) + 0.5)
    if not suspended:
        stuck |= missing_pods(job, spec, seen.pods, seen.create_failures)
    pods = {} if finished else {pod: why.describe() for pod, why in sorted(stuck.items())}
    return Waiting(pods, tuple(requeue))


def missing_pods(
    job: str, spec: TFJobSpec, pods: Sequence[PodObservation], create_failures: Mapping[str, str]
) -> dict[str, Stuck]:
    """Pods a StatefulSet could not create, with Kubernetes' reason (FailedCreate)."""
    present = {p.name for p in pods}
    missing: dict[str, Stuck] = {}
    for rt, rs in spec.replicas().items():
        message = create_failures.get(naming.replica_name(job, rt))
        if message is None:
            continue
        for i in range(rs.replicas):
            pod = naming.pod_name(job, rt, i)
            if pod not in present:
                missing[pod] = Stuck("FailedCreate", message)
    return missing


def waiting_for_kueue(spec: TFJobSpec, job: str, queue: QueueView) -> dict[str, str]:
    """Every pod of a job that Kueue holds waits for it: one reason, said once (the Suspended
    condition's Event), not one Event per pod."""
    why = waiting_message(queue)
    return {pod: Stuck(QUEUED, why).describe() for pod in pods_of(spec, job)}


def waiting_events(prior: st.Status, status: st.Status) -> list[tuple[str, str, str]]:
    """One Warning per pod that starts waiting. Kubelets alternate ErrImagePull and
    ImagePullBackOff, so a new reason for a pod already waiting is no news."""
    before = prior.get("waiting") or {}
    return [
        (
            ("Warning", nodelost.REASON, f"Pod {pod}: {why.removeprefix(nodelost.REASON + ': ')}")
            if why.startswith(nodelost.REASON + ":")
            else ("Warning", st.Reason.POD_WAITING, f"Pod {pod} cannot start: {why}")
        )
        for pod, why in sorted((status.get("waiting") or {}).items())
        if not why.startswith(QUEUED + ":")
        if pod not in before
        or (why.startswith(nodelost.REASON + ":") and not before[pod].startswith(nodelost.REASON))
    ]
