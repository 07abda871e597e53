"""Jobs another controller runs: the operator leaves them alone, and says so.

Two cases. `spec.managedBy` or `runPolicy.managedBy` names another controller (Kueue's
built-in kubeflow.org integration writes the latter for MultiKueue, which runs the job on a
worker cluster and copies its status back): the operator writes nothing, not even a status, and
posts one Event. (`spec.managedBy: kueue.x-k8s.io/multikueue` is not another controller's
alone: the operator makes the job's Workload, `kueue.multikueue`.) A TFJob that another
controller already started (Kubeflow's training-operator made its pods and Services before the
move to this operator): the operator makes no child of its own beside them, and says why in a
condition, until they are gone.

And the other way round: Kueue's own pod or StatefulSet integration taking the operator's
children for its own (it gates or relabels them) when it does not know TFJobs as their owner.
The operator goes on, and says once how to stop it (`kueue_took_over`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from tfjob_operator.api.spec import MULTIKUEUE
from tfjob_operator.rules import kueue
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle import Decision, finish

# runPolicy.managedBy values that mean this operator: unset, Kubeflow's default (we run its
# TFJobs in its place), and our own name.
OURS = frozenset({"kubeflow.org/training-operator", "tfjob.dev/tfjob-operator"})


def managed_elsewhere(spec: Any) -> str | None:
    """The other controller that `spec.managedBy` (but MultiKueue's) or else
    `runPolicy.managedBy` names, or None when it is ours to run (read leniently: an invalid
    spec elsewhere still names its manager)."""
    if not isinstance(spec, dict):
        return None
    top = spec.get("managedBy")
    if isinstance(top, str) and top and top not in OURS:
        return None if top == MULTIKUEUE else top
    policy = spec.get("runPolicy")
    manager = policy.get("managedBy") if isinstance(policy, dict) else None
    if not isinstance(manager, str) or not manager or manager in OURS:
        return None
    return manager


def managed_elsewhere_event(name: str, manager: str) -> tuple[str, str, str]:
    return (
        "Normal",
        st.Reason.MANAGED_ELSEWHERE,
        f"TFJob {name} is managed by {manager}: that controller runs it, and "
        "tfjob-operator leaves it alone (no pods, no status).",
    )


def may_be_started_elsewhere(status: Any) -> bool:
    """A status that someone else wrote: conditions, and no observedGeneration of ours. Only
    such a job is looked at for another controller's children; a new one costs nothing, and
    one that has finished has nothing left to run (its completed pods stay the other's)."""
    if not isinstance(status, dict) or not status.get("conditions") or st.is_finished(status):
        return False
    return "observedGeneration" not in status or st.is_true(status, st.Cond.STARTED_ELSEWHERE)


def started_elsewhere(
    prior: st.Status, foreign: list[str], name: str, now: datetime
) -> Decision | None:
    """The decision for a job whose children another controller made (`foreign`, as
    'Kind/name'): a condition that says so, and nothing else. None when there are none."""
    if not foreign:
        return None
    status = dict(prior)
    status["conditions"] = [dict(c) for c in prior.get("conditions") or []]
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    st.set_condition(
        status,
        st.Cond.STARTED_ELSEWHERE,
        True,
        st.Reason.FOREIGN_CHILDREN,
        f"TFJob {name} was started by another controller (e.g. Kubeflow's training-operator): "
        f"{shown} exist and are not tfjob-operator's. It leaves the job to them: stop that "
        "controller and delete them (or delete and re-create the TFJob) to hand it over.",
        now,
    )
    return finish(prior, status)


def kueue_took_over(
    name: str,
    group: str,
    statefulsets: Iterable[Any],
    pods: Iterable[Any],
) -> tuple[str, str, str] | None:
    """The Warning for a job one of whose StatefulSets or pods (observations with a
    `kueue_takeover`) Kueue's own integrations took, naming the first; None for none. Kueue
    then waits for a Workload of its own for them (the pods stay gated): it must know TFJobs,
    which `integrations.externalFrameworks` tells it."""
    taken = [(f"StatefulSet {s.name}", s.kueue_takeover) for s in statefulsets if s.kueue_takeover]
    taken += [(f"pod {p.name}", p.kueue_takeover) for p in pods if p.kueue_takeover]
    if not taken:
        return None
    child, what = taken[0]
    return (
        "Warning",
        st.Reason.KUEUE_TOOK_OVER_CHILD,
        f"TFJob {name}: Kueue's own integration took its {child} ({what}) and may hold it "
        f"back for a Workload of its own. Add {kueue.external_framework(group)} to Kueue's "
        "integrations.externalFrameworks (and let Kueue read TFJobs: the chart's kueue.enabled "
        "does), so that Kueue sees the TFJob as the owner and leaves its children alone.",
    )
