"""A new template reaches every task of a job at once: which pods to delete for which states of
the StatefulSets, in one reconcile, once; and what the decision makes of it (`status.lastStop`,
an Event, the exits of the pods it stops)."""

from __future__ import annotations

import copy
from datetime import timedelta

import pytest

from tests.unit.operator.rules.lifecycle.decide_run import T0
from tfjob_operator.api.spec import TFJobStatus, parse_spec
from tfjob_operator.controller.projections import job_record
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle import JobView, decide
from tfjob_operator.rules.lifecycle.observation import Observation
from tfjob_operator.rules.lifecycle.restart import UPDATED, restart, restarting
from tfjob_operator.rules.lifecycle.stops import RESIZED
from tfjob_operator.rules.pods import observe
from tfjob_operator.rules.statefulsets import StatefulSetObservation
from tfjob_testbed.core.jobs import pod, tfjob

OLD, NEW = "old", "new"  # revision suffixes: <job>-<type>-old, <job>-<type>-new


def on(rt, i, rev, spec_hash="", **kw):
    """Pod `i` of replica type `rt` (lower case), made from revision `rev` of its StatefulSet,
    whose template had `spec_hash` (none: made before templates carried one)."""
    body = pod("j", rt, i, **kw)
    body["metadata"]["labels"]["controller-revision-hash"] = f"j-{rt}-{rev}"
    if spec_hash:
        body["metadata"]["annotations"] = {"tfjob.dev/spec-hash": spec_hash}
    return body


def deleting(body):
    body = copy.deepcopy(body)
    body["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:30Z"
    body["metadata"]["deletionGracePeriodSeconds"] = 30
    return body


def lost(body):
    body = copy.deepcopy(body)
    body["spec"]["nodeName"] = "gone"
    body["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "lastTransitionTime": st.timestamp(T0)}
    ]
    return body


def sts(rt, rev=NEW, generation=2, observed=2, replicas=1, spec_hash="h2"):
    return StatefulSetObservation(
        f"j-{rt}",
        f"uid-{rt}",
        replicas,
        generation=generation,
        observed_generation=observed,
        update_revision=f"j-{rt}-{rev}",
        spec_hash=spec_hash,
    )


def seen(spec, pods, sets, applied=None, surplus=()):
    observed = [observe(p) for p in pods]
    return Observation(
        pods=tuple(observed),
        now=T0,
        cluster_domain="cluster.local",
        statefulsets=sets,
        surplus=tuple(observe(p) for p in surplus),
        applied=applied or {},
    )


PS_WORKER = {"PS": 1, "Worker": 3}
SETS = [sts("ps"), sts("worker", replicas=3)]
# Worker 2 -> 3: every task's TF_CONFIG changed; worker 2 is new, on the new revision already.
RESIZED_PODS = [on("ps", 0, OLD), on("worker", 0, OLD), on("worker", 1, OLD), on("worker", 2, NEW)]
ALL_OLD = ["j-ps-0", "j-worker-0", "j-worker-1"]

CASES = [
    pytest.param(PS_WORKER, RESIZED_PODS, SETS, {}, ALL_OLD, id="every-pod-of-every-type-at-once"),
    pytest.param(
        PS_WORKER,
        [on("ps", 0, NEW), *(on("worker", i, NEW) for i in range(3))],
        SETS,
        {},
        [],
        id="steady-state-nothing",
    ),
    pytest.param(
        PS_WORKER,
        RESIZED_PODS,
        [sts("ps", rev=OLD, generation=2, observed=1), sts("worker", replicas=3)],
        {},
        [],
        id="a-statefulset-its-controller-has-not-caught-up-with-holds-all",
    ),
    pytest.param(
        PS_WORKER,
        RESIZED_PODS,
        [sts("ps", rev=OLD, generation=1, observed=1), sts("worker", replicas=3)],
        {"j-ps": 2, "j-worker": 2},
        [],
        id="a-view-older-than-the-last-apply-holds-all",
    ),
    pytest.param(
        PS_WORKER,
        RESIZED_PODS,
        SETS,
        {"j-ps": 2, "j-worker": 2},
        ALL_OLD,
        id="a-view-as-new-as-the-last-apply",
    ),
    pytest.param(
        PS_WORKER,
        RESIZED_PODS,
        [sts("worker", replicas=3)],
        {},
        [],
        id="a-statefulset-missing-holds-all",
    ),
    pytest.param(
        PS_WORKER,
        RESIZED_PODS,
        [
            sts("ps"),
            StatefulSetObservation("j-worker", "u", 3, generation=1, observed_generation=1),
        ],
        {},
        [],
        id="no-revision-yet-holds-all",
    ),
    pytest.param(
        PS_WORKER,
        [deleting(on("ps", 0, OLD)), deleting(on("worker", 0, OLD)), on("worker", 1, OLD)],
        SETS,
        {},
        ["j-worker-1"],
        id="one-already-deleting-is-not-deleted-again",
    ),
    pytest.param(
        PS_WORKER,
        [deleting(on("ps", 0, OLD)), *(deleting(on("worker", i, OLD)) for i in range(2))],
        SETS,
        {},
        [],
        id="all-deleting-a-second-run-deletes-nothing",
    ),
    pytest.param(
        PS_WORKER,
        [lost(on("ps", 0, OLD)), on("worker", 0, OLD)],
        SETS,
        {},
        ["j-worker-0"],
        id="a-pod-of-a-lost-node-is-left-to-nodelost",
    ),
    pytest.param(
        PS_WORKER,
        [pod("j", "ps", 0), on("worker", 0, OLD)],
        SETS,
        {},
        ["j-worker-0"],
        id="a-pod-with-no-revision-label-is-left-alone",
    ),
    pytest.param(
        {"PS": 1, "Chief": 1, "Worker": 2},
        [on("ps", 0, NEW), on("chief", 0, OLD), on("worker", 0, NEW), on("worker", 1, NEW)],
        [sts("ps"), sts("chief"), sts("worker", replicas=2)],
        {},
        ["j-chief-0"],
        id="with-a-ps-only-the-types-whose-template-changed",
    ),
    pytest.param(
        {"Chief": 1, "Worker": 2},
        [on("chief", 0, OLD), on("worker", 0, NEW), on("worker", 1, NEW)],
        [sts("chief"), sts("worker", replicas=2)],
        {},
        ["j-chief-0", "j-worker-0", "j-worker-1"],
        id="without-a-ps-every-task-restarts-with-one-type",
    ),
    pytest.param(
        {"PS": 1, "Worker": 2},
        [on("ps", 0, OLD), on("worker", 0, NEW), on("worker", 1, NEW)],
        [sts("ps"), sts("worker", replicas=2)],
        {},
        ["j-ps-0", "j-worker-0", "j-worker-1"],
        id="a-parameter-server-restarts-with-every-task",
    ),
    pytest.param(
        {"PS": 1, "Worker": 1, "Evaluator": 1},
        [on("ps", 0, OLD), on("worker", 0, NEW), on("evaluator", 0, NEW)],
        [sts("ps"), sts("worker"), sts("evaluator")],
        {},
        ["j-ps-0", "j-worker-0"],
        id="the-evaluator-is-outside-the-cluster",
    ),
    pytest.param(
        PS_WORKER,
        [on("ps", 0, OLD, "h2"), *(on("worker", i, OLD, "h2") for i in range(3))],
        SETS,
        {},
        [],
        id="a-new-operator-version-alone-rolls-no-pod",
    ),
    pytest.param(
        PS_WORKER,
        [on("ps", 0, OLD, "h1"), *(on("worker", i, OLD, "h1") for i in range(3))],
        SETS,
        {},
        ["j-ps-0", "j-worker-0", "j-worker-1", "j-worker-2"],
        id="a-change-of-the-users-rolls-every-pod",
    ),
    pytest.param(
        PS_WORKER,
        [on("ps", 0, OLD, "h2"), on("worker", 0, OLD, "h1"), on("worker", 1, NEW, "h2")],
        SETS,
        {},
        ["j-worker-0"],
        id="only-the-pods-whose-users-part-changed",
    ),
]


@pytest.mark.parametrize(("replicas", "pods", "sets", "applied", "want"), CASES)
def test_which_pods_to_delete(replicas, pods, sets, applied, want):
    spec = parse_spec(tfjob(replicas=replicas)["spec"])
    again = restart("j", spec, seen(spec, pods, sets, applied))
    assert ([p.name for p in again.pods] if again else []) == want
    assert again is None or {p.uid for p in again.pods} == {f"uid-{n}" for n in want}


@pytest.mark.parametrize(
    ("replicas", "pods", "surplus", "cause", "message"),
    [
        (
            PS_WORKER,
            RESIZED_PODS,
            [],
            RESIZED,
            "Worker 2 → 3: 3 pods restart together with the new cluster",
        ),
        (
            {"PS": 2, "Worker": 2},
            [on("ps", 0, OLD), on("ps", 1, NEW), on("worker", 0, OLD), on("worker", 1, OLD)],
            # Worker 2, scaled away by its StatefulSet, still stopping.
            [deleting(on("worker", 2, OLD))],
            RESIZED,
            "PS 1 → 2, Worker 3 → 2: 3 pods restart together with the new cluster",
        ),
        (
            {"Worker": 2},
            [on("worker", 0, OLD), on("worker", 1, OLD)],
            [],
            UPDATED,
            "a new pod template for Worker: 2 pods restart together",
        ),
        (
            {"Chief": 1, "Worker": 2},
            [on("chief", 0, OLD), on("worker", 0, NEW), on("worker", 1, NEW)],
            [],
            UPDATED,
            "a new pod template for Chief: 3 pods restart together",
        ),
    ],
)
def test_why_they_restart(replicas, pods, surplus, cause, message):
    spec = parse_spec(tfjob(replicas=replicas)["spec"])
    sets = [sts(rt.lower(), replicas=n) for rt, n in replicas.items()]
    again = restart("j", spec, seen(spec, pods, sets, surplus=surplus))
    assert (again.cause, again.message) == (cause, message)


def test_the_exits_of_pods_deleted_off_an_old_revision_are_the_restarts():
    spec = parse_spec(tfjob(replicas=PS_WORKER)["spec"])
    pods = [
        deleting(on("ps", 0, OLD, state="terminated", exit_code=143)),
        deleting(on("worker", 0, NEW)),  # deleted by hand: its exit is its own
        on("worker", 1, OLD),  # not deleted yet
        # Off an old revision for a new operator version only: not the operator's restart.
        deleting(on("worker", 2, OLD, "h2")),
    ]
    assert restarting("j", seen(spec, pods, SETS)) == {"j-ps-0"}


def step(body, pods, sets, now, applied=None):
    """One decision as the operator makes it, its status fed back as the stored one."""
    view = JobView.from_body(job_record(body))
    d = decide(view, pods, now, "cluster.local", statefulsets=sets, applied=applied)
    body["status"] = d.status
    TFJobStatus.model_validate(d.status)
    return d


def resized_job():
    """A job running with PS 1, Worker 2 whose Worker.replicas was just set to 3."""
    body = tfjob(name="j", replicas={"PS": 1, "Worker": 2})
    pods = [on("ps", 0, OLD), *(on("worker", i, OLD) for i in range(2))]
    before = [sts("ps", OLD, 1, 1), sts("worker", OLD, 1, 1, replicas=2)]
    step(body, [observe(p) for p in pods], before, T0)
    assert st.state(body["status"]) == "Running"
    body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3
    return body


def test_a_resize_restarts_every_task_once_and_says_so():
    body = resized_job()
    now = T0 + timedelta(seconds=10)
    pods = [observe(p) for p in RESIZED_PODS]
    d = step(body, pods, SETS, now)
    assert [name for name, _ in d.restart_pods] == ALL_OLD
    assert body["status"]["lastStop"] == {
        "cause": RESIZED,
        "message": "Worker 2 → 3: 3 pods restart together with the new cluster",
        "time": st.timestamp(now),
        "podUIDs": ["uid-j-ps-0", "uid-j-worker-0", "uid-j-worker-1"],  # the pods it stops
    }
    assert ("Normal", RESIZED, f"TFJob default/j: {body['status']['lastStop']['message']}.") in (
        d.events
    )
    # A reconcile whose view does not show the deletions yet asks for the same pods, and
    # records and says nothing new (the operator does not send the deletions twice).
    again = step(body, pods, SETS, now + timedelta(seconds=1))
    assert again.restart_pods == d.restart_pods and again.patch == {}
    assert not [e for e in again.events if e[1] == RESIZED]
    # Once they show as deleting, nothing more; their exits (143: a program that does not
    # save on SIGTERM) are no failure, even under restartPolicy Never.
    stopping = [
        deleting(on("ps", 0, OLD, state="terminated", exit_code=143)),
        deleting(on("worker", 0, OLD, state="terminated", exit_code=137)),
        deleting(on("worker", 1, OLD)),
        on("worker", 2, NEW),
    ]
    later = step(body, [observe(p) for p in stopping], SETS, now + timedelta(seconds=2))
    assert later.restart_pods == []
    assert st.state(body["status"]) == "Running" and "failure" not in body["status"]
    assert body["status"]["lastStop"]["cause"] == RESIZED, "their deletions join the restart"


def test_a_suspended_or_finished_job_restarts_nothing():
    body = resized_job()
    body["spec"]["runPolicy"] = {"suspend": True}
    d = step(body, [observe(p) for p in RESIZED_PODS], SETS, T0 + timedelta(seconds=10))
    assert st.state(body["status"]) == "Suspended" and d.restart_pods == []
    assert (body["status"].get("lastStop") or {}).get("cause") != RESIZED
    body = resized_job()
    done = [on("ps", 0, OLD), on("worker", 0, OLD, state="terminated", exit_code=0)]
    d = step(body, [observe(p) for p in done], SETS, T0 + timedelta(seconds=10))
    assert st.state(body["status"]) == "Succeeded" and d.restart_pods == []
