"""Exits, failure restarts and pods lost with their node: what the containers' ends count for.

The ledger (`status.terminations`) remembers what each pod has been counted for, so that each
exit and each loss counts once, across reconciles and restarts of the operator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tfjob_operator.api.spec import RestartPolicy, TFJobSpec
from tfjob_operator.rules import nodelost
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle.change import Change, Condition
from tfjob_operator.rules.pods import Exit, PodObservation
from tfjob_operator.rules.restartpolicy import is_retryable


@dataclass(frozen=True)
class Failure:
    """A pod that failed: it exited non-zero, or it was lost with its node."""

    pod: PodObservation
    exit: Exit | None  # None: lost with its node (`pod.node`)

    def describe(self) -> str:
        who = f"{self.pod.replica_type.value} pod {self.pod.name}"
        if self.exit is None:
            return f"{who} was lost with node {self.pod.node}"
        reason = f" ({self.exit.reason})" if self.exit.reason else ""
        return f"{who} exited with code {self.exit.code}{reason}"

    def info(self) -> dict[str, Any]:
        where = {"replicaType": self.pod.replica_type.value, "pod": self.pod.name}
        if self.exit is None:
            return {**where, "reason": nodelost.REASON, "node": self.pod.node}
        return {**where, "exitCode": self.exit.code, "reason": self.exit.reason}


@dataclass(frozen=True)
class Tally:
    """What the exits (or losses) not counted before come to: the ledger that remembers them,
    and the failures they are. Each retryable failure is one failure restart of its replica
    type. `gone` are the pods lost for good, to delete."""

    ledger: dict[str, Any]
    fatal: tuple[Failure, ...] = ()
    retryable: tuple[Failure, ...] = ()
    gone: tuple[PodObservation, ...] = ()


def failed(failure: Failure, spec: TFJobSpec, name: str) -> Change:
    """The job's failure: a pod failed in a way its replica's restartPolicy does not retry."""
    rp = spec.replicas()[failure.pod.replica_type].restart_policy.value
    cond = Condition(
        st.Cond.FAILED,
        True,
        st.Reason.FAILED,
        f"TFJob {name} failed: {failure.describe()} under restartPolicy {rp}.",
    )
    return Change((cond,), {"failure": failure.info()})


def account_exits(
    ledger: Mapping[str, Any],
    pods: Sequence[PodObservation],
    spec: TFJobSpec,
    stopped: bool = False,
) -> Tally:
    """The exits not seen before, folded into the ledger, as failures fatal or retryable.

    The exits of a job that is `stopped` (suspended, queued, evicted by Kueue) are its pods
    being stopped: remembered, never counted as failures; nor is a stop on request
    (`EXIT_STOPPED`: the trainer saved and exited on SIGTERM), whatever stopped it (`stops`).
    """
    new = dict(ledger)
    replicas = spec.replicas()
    fatal: list[Failure] = []
    retryable: list[Failure] = []
    for pod in pods:
        entry = new.get(pod.name)
        if entry is None or entry.get("uid") != pod.uid:
            entry = {"uid": pod.uid, "count": 0, "succeeded": False}
        fresh = pod.terminations - entry["count"]
        if fresh <= 0:
            # A pod that has not exited yet has nothing to remember: no entry, so that a pod
            # appearing costs no status write.
            if entry["count"] or entry["succeeded"] or entry.get("lost"):
                new[pod.name] = entry
            else:
                new.pop(pod.name, None)
            continue
        for ex in fresh_exits(pod, fresh):
            if ex.stopped or (stopped and ex.code != 0):
                continue
            if ex.code == 0:
                entry = {**entry, "succeeded": True}
            elif is_retryable(replicas[pod.replica_type].restart_policy, ex.code):
                retryable.append(Failure(pod, ex))
            else:
                fatal.append(Failure(pod, ex))
        new[pod.name] = {**entry, "count": pod.terminations}
    live = {p.name for p in pods}
    for name in [n for n in new if n not in live]:
        del new[name]
    return Tally(new, tuple(fatal), tuple(retryable))


def account_losses(
    ledger: Mapping[str, Any], pods: Sequence[PodObservation], spec: TFJobSpec, now: datetime
) -> Tally:
    """Pods lost with their node past runPolicy.nodeLostTimeoutSeconds, folded into the ledger.
    Each loss counts once, as a failure under the replica's restartPolicy (a lost node is no
    verdict of the program: ExitCode retries it, like a signal); each such pod is `gone`."""
    new = dict(ledger)
    replicas = spec.replicas()
    fatal: list[Failure] = []
    retryable: list[Failure] = []
    gone: list[PodObservation] = []
    for pod in pods:
        if pod.lost_since is None:
            continue
        due = nodelost.deadline(pod.lost_since, spec.run_policy.node_lost_timeout_seconds)
        if due is None or now < due:
            continue
        gone.append(pod)
        entry = new.get(pod.name)
        if entry is not None and entry.get("uid") == pod.uid and entry.get("lost"):
            continue  # counted; its deletion is on the way
        if entry is None or entry.get("uid") != pod.uid:
            entry = {"uid": pod.uid, "count": pod.terminations, "succeeded": False}
        new[pod.name] = {**entry, "lost": True}
        failure = Failure(pod, None)
        if replicas[pod.replica_type].restart_policy is RestartPolicy.NEVER:
            fatal.append(failure)
        else:
            retryable.append(failure)
    return Tally(new, tuple(fatal), tuple(retryable), tuple(gone))


def record(status: st.Status, tally: Tally) -> None:
    """Write a tally into the status: its ledger, and one failure restart per retryable one."""
    status["terminations"] = tally.ledger
    replica_statuses = status.setdefault("replicaStatuses", {})
    for failure in tally.retryable:
        rs = replica_statuses.setdefault(failure.pod.replica_type.value, {})
        rs["restarts"] = rs.get("restarts", 0) + 1


def fresh_exits(pod: PodObservation, fresh: int) -> list[Exit]:
    """The `fresh` exits not counted yet, oldest first.

    A pod shows at most its two newest exits. Older ones happened while nobody watched (the
    operator was down); `restartCount` still counts them, and each is taken to have ended as
    the oldest exit the pod still shows.
    """
    known = pod.known_exits()
    missed = fresh - len(known)
    if missed <= 0:
        return known[-fresh:]
    return [known[0]] * missed + known if known else []


def is_down_after_failure(pod: PodObservation) -> bool:
    latest = pod.latest_exit
    return not pod.running and not pod.deleting and latest is not None and _failed(latest)


def _failed(ex: Exit) -> bool:
    """A non-zero exit that is no stop on request."""
    return ex.code != 0 and not ex.stopped


def restarts_so_far(status: st.Status) -> int:
    """The failure restarts of every replica type, as counted in the status."""
    return sum(rs.get("restarts", 0) for rs in (status.get("replicaStatuses") or {}).values())


def replica_counts(
    status: st.Status, pods: Sequence[PodObservation], spec: TFJobSpec, frozen: bool
) -> dict[str, Any]:
    """The status fields that count the replicas: active, succeeded, failed, restarts. A
    `frozen` (finished) job keeps its counts but the active ones; none if it had none."""
    old = status.get("replicaStatuses") or {}
    if frozen and not old:
        return {}  # finished before anything was counted (an invalid spec): the status is final
    # The reconcile that finishes the job counts the exits that decided it, from the ledger:
    # the kubelet may have started the container again (restartPolicy Always) before anyone
    # looked, and the counts are frozen from then on.
    finishing = st.is_finished(status)
    ledger = status.get("terminations") or {}
    failure = (status.get("failure") or {}).get("pod")
    counts: dict[str, Any] = {}
    for rt in spec.replicas():
        prev = old.get(rt.value) or {}
        mine = [p for p in pods if p.replica_type is rt]
        # A pod being deleted is active until its container stops: it still holds its node's
        # resources, and Kueue waits for every active count to be 0 before it gives a
        # preempted job's quota to another (as Kubeflow counts, by running pods). A pod on a
        # node that stopped answering is not: whatever it still does, nobody can use it.
        active = sum(1 for p in mine if p.up)
        if frozen:
            counts[rt.value] = {**prev, "active": active}
            continue
        verdicts = [_verdict(p, ledger, failure) if finishing else _down(p) for p in mine]
        counts[rt.value] = {
            "active": active,
            "succeeded": verdicts.count("succeeded"),
            "failed": verdicts.count("failed"),
            "restarts": prev.get("restarts", 0),
        }
    expected = sum(rs.replicas for rs in spec.replicas().values())
    return {
        "replicaStatuses": counts,
        "activeReplicas": f"{sum(c['active'] for c in counts.values())}/{expected}",
        "restarts": sum(c.get("restarts", 0) for c in counts.values()),
    }


def _down(pod: PodObservation) -> str | None:
    """How a pod that is down ended: "succeeded", "failed", or None (it runs, or never ran)."""
    ex = None if pod.running else pod.latest_exit
    if ex is None:
        return None
    return "succeeded" if ex.code == 0 else "failed" if _failed(ex) else None


def _verdict(pod: PodObservation, ledger: Mapping[str, Any], failure: str | None) -> str | None:
    """How a pod of a job that has just finished counts: as it is down, else as the ledger
    remembers its success or the status names it as the job's failure."""
    down = _down(pod)
    if down is not None:
        return down
    entry = ledger.get(pod.name) or {}
    if entry.get("uid") == pod.uid and entry.get("succeeded"):
        return "succeeded"
    return "failed" if pod.name == failure else None
