"""How a job that may run moves forward, one reconcile at a time: to its verdict (success, a
fatal failure, or a limit), else Restarting or Running. The limits themselves are `limits`."""

from __future__ import annotations

from collections.abc import Sequence

from tfjob_operator.api.spec import TFJobSpec
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle.change import Change, Condition
from tfjob_operator.rules.lifecycle.exits import (
    Failure,
    failed,
    is_down_after_failure,
    restarts_so_far,
)
from tfjob_operator.rules.lifecycle.limits import (
    backoff_exceeded,
    deadline_exceeded,
    deadline_left,
    has_succeeded,
    succeeded,
)
from tfjob_operator.rules.lifecycle.observation import Observation


def advance(
    status: st.Status,
    spec: TFJobSpec,
    seen: Observation,
    fatal: Sequence[Failure],
    retryable: Sequence[Failure],
    job: str,
    name: str,
) -> Change:
    """The next step of a running job, from its status with this reconcile's exits and losses
    counted: success, failure, backoffLimit, deadline, restarting or running. Until its
    deadline, it asks to be looked at again then."""
    policy = spec.run_policy
    restarts = restarts_so_far(status)
    left = deadline_left(status, policy, seen.now)
    if has_succeeded(status, spec, job):
        return Change((succeeded(spec, name),))
    if fatal:
        return failed(fatal[0], spec, name)
    over = backoff_exceeded(policy, restarts, retryable, name)
    if over is not None:
        return over
    if left is not None and left <= 0:
        return Change((deadline_exceeded(policy, name),))
    return Change(
        _under_way(status, spec, seen, retryable, name, restarts),
        requeue=() if left is None else (left,),
    )


def _under_way(
    status: st.Status,
    spec: TFJobSpec,
    seen: Observation,
    retryable: Sequence[Failure],
    name: str,
    restarts: int,
) -> tuple[Condition, ...]:
    """Restarting while a pod is down after a failure; Running once every pod is up (or, for a
    job already under way, once any is)."""
    down = [p for p in seen.pods if is_down_after_failure(p)]
    if down or any(f.exit is None for f in retryable):
        culprit = (
            retryable[-1].describe()
            if retryable
            else Failure(down[0], down[0].latest_exit).describe()
        )
        return (
            Condition(
                st.Cond.RESTARTING,
                True,
                st.Reason.RESTARTING,
                f"TFJob {name} is restarting: {culprit}; {restarts} failure restart(s) so far.",
            ),
        )
    expected = sum(rs.replicas for rs in spec.replicas().values())
    active = sum(1 for p in seen.pods if p.up and not p.deleting)
    under_way = st.is_true(status, st.Cond.RUNNING) or st.is_true(status, st.Cond.RESTARTING)
    if active == expected or (under_way and active > 0):
        return (Condition(st.Cond.RUNNING, True, st.Reason.RUNNING, f"TFJob {name} is running."),)
    return ()
