"""A task that ended stays ended: which pods the operator's finalizer holds, which it lets go
and when, and what a finished job waits for, in the decision the operator acts on."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest

from tests.unit.operator.rules.lifecycle.decide_run import T0
from tfjob_operator.api.spec import ReplicaType as RT
from tfjob_operator.api.spec import RestartPolicy as RP
from tfjob_operator.controller.projections import job_record
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle import JobView, decide
from tfjob_operator.rules.lifecycle.ended import (
    OTHERS_TIMEOUT,
    held,
    releases,
    settled,
    task_ended,
    waits_for_others,
)
from tfjob_operator.rules.pods import observe
from tfjob_operator.rules.statefulsets import StatefulSetObservation
from tfjob_testbed.core.jobs import container_status, pod, tfjob

OURS = "tfjob.dev/task-ended"
NEVER = {RT.CHIEF: RP.NEVER, RT.WORKER: RP.NEVER}
ON_FAILURE = {RT.CHIEF: RP.ON_FAILURE, RT.WORKER: RP.ON_FAILURE}


def body(rt="worker", i=0, phase="Succeeded", code=0, finalizers=(OURS,), gone=False, **kw):
    """A pod of job `j`, owned by its StatefulSet `uid-<rt>`, whose TensorFlow container exited
    with `code` (None: it runs), in `phase`; `gone`: being deleted."""
    container = {"state": "running"} if code is None else {"state": "terminated", "exit_code": code}
    made = pod("j", rt, i, phase=phase, finalizers=list(finalizers), **container, **kw)
    made["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": f"j-{rt}",
            "uid": f"uid-{rt}",
            "controller": True,
        }
    ]
    if gone:
        made["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:30Z"
        made["metadata"]["deletionGracePeriodSeconds"] = 30
    return made


def sts(rt="worker", replicas=2, deleting=False):
    return StatefulSetObservation(f"j-{rt}", f"uid-{rt}", replicas, deleting=deleting)


@pytest.mark.parametrize(
    ("pod_kw", "policies", "ended"),
    [
        ({}, NEVER, True),  # succeeded
        ({"code": 1, "phase": "Failed"}, NEVER, True),  # its failure ends the job
        ({"code": 137, "phase": "Failed"}, ON_FAILURE, False),  # retried: made again
        ({"code": 137, "phase": "Failed"}, {}, True),  # no spec: any exit taken as final
        ({"phase": "Running"}, NEVER, False),  # another container runs on
        ({"code": None, "phase": "Failed"}, NEVER, False),  # evicted before it ran
    ],
    ids=["succeeded", "failed-never", "failed-retried", "no-spec", "running", "no-exit"],
)
def test_which_ends_end_a_task(pod_kw, policies, ended):
    assert task_ended(observe(body(**pod_kw)), policies) is ended


@pytest.mark.parametrize(
    ("pod_kw", "sets", "is_held"),
    [
        ({}, [sts()], True),  # its StatefulSet would make it again
        ({"i": 1}, [sts(replicas=1)], False),  # scaled below it
        ({}, [sts(replicas=0)], False),  # the job's end scaled it away
        ({}, [sts(deleting=True)], False),  # the job deleted
        ({}, [], False),  # the StatefulSet gone
        ({"finalizers": ()}, [sts()], False),  # not ours to hold
        ({"code": None, "phase": "Running"}, [sts()], False),  # still running: deleted
    ],
    ids=[
        "wanted",
        "scaled-below",
        "scaled-away",
        "set-deleting",
        "set-gone",
        "no-finalizer",
        "running",
    ],
)
def test_a_pod_whose_task_ended_is_held_while_its_statefulset_would_make_it_again(
    pod_kw, sets, is_held
):
    assert held(observe(body(gone=True, **pod_kw)), sets, NEVER) is is_held


def test_every_deletion_but_a_held_one_is_let_go_and_only_ours():
    pods = [
        observe(body(gone=True)),  # held
        observe(body(i=1, code=None, phase="Running", gone=True)),  # deleted while running
        observe(body(i=2, gone=True, finalizers=("kubeflow.org/task-ended",))),  # the other's
        observe(body(i=3)),  # ended, not deleted yet
    ]
    assert releases(pods, [sts(replicas=4)], NEVER, "tfjob.dev") == [
        ("j-worker-1", "uid-j-worker-1")
    ]


def test_a_held_pod_is_no_stop_for_the_lifecycle():
    ended = settled(observe(body(gone=True)), NEVER)
    assert not ended.deleting and ended.deleted_at is None and ended.grace is None
    running = observe(body(code=None, phase="Running", gone=True))
    assert settled(running, NEVER).deleting  # a stop, as always


def with_collector(rt="chief", collector="running", restarts=0, **kw):
    made = body(rt=rt, phase="Running", **kw)
    other = container_status(state=collector, exit_code=0 if collector == "terminated" else None)
    made["status"]["containerStatuses"].append(
        {**other, "name": "metrics-logger-and-collector", "restartCount": restarts}
    )
    return made


@pytest.mark.parametrize(
    ("pod_body", "after", "waits"),
    [
        (with_collector(), 5, True),
        (with_collector(), OTHERS_TIMEOUT.total_seconds() + 1, False),  # not for ever
        (with_collector(collector="terminated"), 5, False),  # its work is done
        (with_collector(restarts=1), 5, False),  # ended once, started again by Always
        (with_collector(finalizers=()), 5, False),  # no restart rules: nothing to wait for
        (body(rt="chief"), 5, False),
    ],
    ids=["collecting", "timed-out", "collector-done", "collector-restarted", "no-rules", "alone"],
)
def test_a_finished_job_waits_a_while_for_a_done_pods_other_containers(pod_body, after, waits):
    names, left = waits_for_others([observe(pod_body)], T0, T0 + timedelta(seconds=after))
    assert (names == {"j-chief"}) is waits
    assert (
        (left == pytest.approx(OTHERS_TIMEOUT.total_seconds() - after)) if waits else left is None
    )


def _decide(job, pods, sets):
    view = JobView.from_body(job_record(job), restart_rules=True)
    obs = [observe(p) for p in pods]
    return decide(view, obs, T0, "cluster.local", statefulsets=sets, restart_rules=True)


def _job(**kw):
    return tfjob("j", replicas={"Chief": 1, "Worker": 2}, restart_policy="Never", **kw)


def test_a_chief_that_succeeded_is_let_go_in_the_decision_that_scales_its_job_down():
    sets = [sts("chief", 1), sts("worker", 2)]
    chief = body("chief", gone=True)  # the StatefulSet controller deleted it: Succeeded
    workers = [body("worker", i, code=None, phase="Running") for i in range(2)]
    d = _decide(_job(), [chief, *workers], sets)
    assert st.state(d.status) == "Succeeded"
    assert sorted(d.scale_down) == ["j-chief", "j-worker"]
    assert d.release_pods == [("j-chief-0", "uid-j-chief-0")]
    assert not d.restart_pods and not d.done_pods  # nothing deleted to end a done task
    assert (d.status.get("lastStop") or {}) == {}  # its deletion is no stop


def test_under_clean_pod_policy_none_a_done_pod_is_held_until_its_job_goes():
    sets = [sts("chief", 1), sts("worker", 2)]
    job = _job(run_policy={"cleanPodPolicy": "None"})
    d = _decide(job, [body("chief", gone=True)], sets)
    assert st.state(d.status) == "Succeeded"
    assert d.scale_down == [] and d.release_pods == []


def test_a_worker_done_early_is_held_while_the_job_runs_and_no_stop_is_recorded():
    sets = [sts("chief", 1), sts("worker", 2)]
    pods = [
        body("chief", code=None, phase="Running"),
        body("worker", 0, code=None, phase="Running"),
        body("worker", 1, gone=True),
    ]
    d = _decide(_job(), pods, sets)
    assert st.state(d.status) in ("Created", "Running")
    assert d.release_pods == [] and d.restart_pods == []
    assert "lastStop" not in d.status


def test_a_failure_retried_under_the_policy_as_edited_is_let_go_to_be_made_again():
    sets = [sts("chief", 1), sts("worker", 2)]
    job = _job(policies={"Worker": "OnFailure"})
    pods = [
        body("chief", code=None, phase="Running"),
        body("worker", 1, code=137, phase="Failed", gone=True),  # made under Never
    ]
    d = _decide(job, pods, sets)
    assert d.release_pods == [("j-worker-1", "uid-j-worker-1")]
    assert st.state(d.status) != "Failed"


def test_a_finished_job_with_a_collector_running_keeps_that_statefulset_a_while():
    sets = [sts("chief", 1), sts("worker", 2)]
    d = _decide(_job(), [with_collector()], sets)
    assert st.state(d.status) == "Succeeded"
    assert d.scale_down == ["j-worker"]
    assert d.requeue_after == pytest.approx(OTHERS_TIMEOUT.total_seconds())
    later = copy.deepcopy(_job(status=d.status))
    d2 = _decide(later, [with_collector(collector="terminated")], sets)
    assert sorted(d2.scale_down) == ["j-chief", "j-worker"]
