"""A parameter server stopped on purpose stops its whole job: which pods go with it, for which
states of the job, and what the status and the Events say, reconcile after reconcile."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.unit.operator.rules.lifecycle.decide_run import T0, Run, running
from tests.unit.operator.rules.lifecycle.test_stops import deleting, stopped
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle import stops, together
from tfjob_testbed.core.jobs import pod, tfjob

SPEC = {"Chief": 1, "PS": 2, "Worker": 2}
OTHERS = ["mnist-chief-0", "mnist-ps-1", "mnist-worker-0", "mnist-worker-1"]
DRAIN = "EvictionByEvictionAPI"


def made(body, at):
    body["metadata"]["creationTimestamp"] = st.timestamp(at)
    return body


def job_pods(ps0=None, *replaced):
    """The job's pods, made at T0; `ps0` stands for mnist-ps-0, each of `replaced` for the pod
    of its name."""
    pods = [made(p, T0) for p in running("mnist", SPEC)]
    by_name = {p["metadata"]["name"]: p for p in pods}
    if ps0 is not None:
        by_name["mnist-ps-0"] = ps0
    by_name.update({p["metadata"]["name"]: p for p in replaced})
    return list(by_name.values())


def ps_going(run, reason=DRAIN):
    return deleting(made(pod("mnist", "ps", 0), T0), run.now, reason)


def started(**run_policy):
    run = Run(tfjob(replicas=SPEC, run_policy=run_policy or None))
    run.step(*job_pods())
    return run


def test_a_parameter_server_drained_alone_stops_every_other_pod_of_its_job_once():
    run = started()
    ps = ps_going(run)
    d = run.step(*job_pods(ps))
    assert sorted(n for n, _ in d.restart_pods) == OTHERS
    last = run.status["lastStop"]
    assert last["cause"] == stops.DISRUPTED and "mnist-ps-0" in last["message"]
    assert set(last["podUIDs"]) >= {f"uid-{n}" for n in OTHERS}
    told = [e for e in d.events if e[1] == together.REASON]
    assert len(told) == 1 and told[0][0] == "Normal" and "mnist-chief-0" in told[0][2]

    # A view that does not show the deletions yet asks for them again, and says nothing new.
    again = run.step(*job_pods(ps))
    assert sorted(n for n, _ in again.restart_pods) == OTHERS
    assert not [e for e in again.events if e[1] == together.REASON]
    assert run.status["lastStop"] == last

    # Their deletions, whenever they began by the API server's clock, are that stop; the
    # chief's save is its step.
    later = run.now + timedelta(minutes=3)
    gone = [
        deleting(made(stopped("chief", 0, 4200), T0), later),
        deleting(made(pod("mnist", "worker", 0), T0), later),
        deleting(made(pod("mnist", "worker", 1), T0), later),
        deleting(made(pod("mnist", "ps", 1), T0), later),
    ]
    d = run.step(*job_pods(ps, *gone))
    assert d.restart_pods == []
    now = run.status["lastStop"]
    assert {k: now[k] for k in ("cause", "time", "message")} == {
        k: last[k] for k in ("cause", "time", "message")
    }
    assert now["savedStep"] == 4200
    assert not run.status.get("failure") and run.state() != "Failed"
    assert [e[1] for e in d.events] == [stops.REASON]


def test_the_next_runs_pods_stay_while_the_parameter_server_still_goes():
    """Made again by their StatefulSets after the stop began: the job's next run."""
    run = started()
    ps = ps_going(run)
    run.step(*job_pods(ps))
    again = run.now + timedelta(seconds=2)
    new = [made(pod("mnist", "chief", 0), again), made(pod("mnist", "worker", 0), again)]
    d = run.step(*job_pods(ps, *new))
    assert sorted(n for n, _ in d.restart_pods) == ["mnist-ps-1", "mnist-worker-1"]


@pytest.mark.parametrize(
    ("case", "want"),
    [
        ("deleted-by-hand", OTHERS),
        ("lost-with-its-node", []),
        ("the-whole-job-drained", []),
        ("suspended", []),
        ("a-worker-drained-alone", []),
    ],
)
def test_which_stops_of_a_parameter_server_stop_the_job(case, want):
    run = started(suspend=True) if case == "suspended" else started()
    if case == "deleted-by-hand":
        pods = job_pods(ps_going(run, None))
    elif case == "lost-with-its-node":
        lost = made(pod("mnist", "ps", 0), T0)
        lost["spec"]["nodeName"] = "gone"
        lost["status"]["conditions"] = [
            {"type": "Ready", "status": "False", "lastTransitionTime": st.timestamp(T0)}
        ]
        pods = job_pods(deleting(lost, run.now))
    elif case == "the-whole-job-drained":
        pods = [deleting(p, run.now, DRAIN) for p in job_pods()]
    elif case == "suspended":
        pods = job_pods(ps_going(run))
    else:
        pods = job_pods(None, deleting(made(pod("mnist", "worker", 1), T0), run.now, DRAIN))
    d = run.step(*pods)
    assert sorted(n for n, _ in d.restart_pods) == want
