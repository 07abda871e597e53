"""Pods -> status: the lifecycle rules as tables over `decide`, with the status fed back."""

from __future__ import annotations

import pytest

from tests.unit.operator.rules.lifecycle.decide_run import T0, Run, running
from tfjob_operator.rules import status as st
from tfjob_operator.rules.lifecycle import JobView, decide
from tfjob_testbed.core.jobs import pod, tfjob


def test_created_then_running_then_succeeded_history():
    spec = {"Chief": 1, "PS": 1, "Worker": 2}
    run = Run(tfjob(replicas=spec))
    d = run.step()
    assert run.state() == "Created"
    assert run.status["startTime"] == st.timestamp(run.now)
    assert run.replicas("StatefulSet") == {"mnist-chief": 1, "mnist-ps": 1, "mnist-worker": 2}
    run.step(pod("mnist", "chief", 0), pod("mnist", "ps", 0), pod("mnist", "worker", 0))
    assert run.state() == "Created", "Running waits for every pod"
    run.step(*running("mnist", spec))
    assert run.state() == "Running"
    assert run.status["activeReplicas"] == "4/4"
    pods = running("mnist", spec)
    pods[0] = pod("mnist", "chief", 0, state="terminated", exit_code=0)
    d = run.step(*pods)
    assert run.state() == "Succeeded"
    assert [(c["type"], c["status"]) for c in run.status["conditions"]] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Succeeded", "True"),
    ]
    assert run.status["completionTime"] == st.timestamp(run.now)
    assert "failure" not in run.status
    assert run.replicas("StatefulSet") == {"mnist-chief": 0, "mnist-ps": 0, "mnist-worker": 0}
    assert run.status["replicaStatuses"]["Chief"] == {
        "active": 0,
        "succeeded": 1,
        "failed": 0,
        "restarts": 0,
    }
    assert run.reasons() == ["TFJobCreated", "TFJobRunning", "TFJobSucceeded"]
    assert all(t == "Normal" for t, _, _ in run.events)
    # Scaled-down pods disappear; the outcome stays.
    d = run.step()
    assert run.state() == "Succeeded" and not d.events
    assert run.status["replicaStatuses"]["Chief"]["succeeded"] == 1
    assert run.status["activeReplicas"] == "0/4"


def test_second_decision_on_same_input_changes_nothing():
    spec = {"PS": 1, "Worker": 2}
    run = Run(tfjob(replicas=spec))
    run.step(*running("mnist", spec))
    first = run.last
    again = run.step(*running("mnist", spec), after=0)
    assert again.patch == {} and again.events == []
    assert again.children == first.children


@pytest.mark.parametrize(
    ("spec", "policy", "finisher", "succeeds"),
    [
        ({"PS": 1, "Worker": 2}, "", ("worker", 0), True),
        ({"PS": 1, "Worker": 2}, "", ("worker", 1), False),
        ({"PS": 1, "Worker": 2}, "", ("ps", 0), False),
        ({"Chief": 1, "Worker": 2}, "", ("worker", 0), False),
        ({"Master": 1, "Worker": 1}, "", ("master", 0), True),
        ({"Chief": 1, "Worker": 1, "Evaluator": 1}, "", ("evaluator", 0), False),
        ({"Worker": 2}, "AllWorkers", ("worker", 0), False),
    ],
)
def test_who_decides_success(spec, policy, finisher, succeeds):
    run = Run(tfjob(replicas=spec, **({"successPolicy": policy} if policy else {})))
    pods = running("mnist", spec)
    rt, i = finisher
    pods = [p for p in pods if p["metadata"]["name"] != f"mnist-{rt}-{i}"]
    run.step(*pods, pod("mnist", rt, i, state="terminated", exit_code=0))
    assert (run.state() == "Succeeded") is succeeds


def test_all_workers_remembers_workers_that_exited_0_and_restarted():
    spec = {"Worker": 2}
    run = Run(tfjob(replicas=spec, successPolicy="AllWorkers"))
    run.step(*running("mnist", spec))
    run.step(pod("mnist", "worker", 0, state="terminated", exit_code=0), pod("mnist", "worker", 1))
    assert run.state() == "Running"
    # The StatefulSet restarts worker 0 (restartPolicy Always): its success is remembered.
    run.step(pod("mnist", "worker", 0, last_exit=0, restarts=1), pod("mnist", "worker", 1))
    assert run.state() == "Running"
    run.step(
        pod("mnist", "worker", 0, last_exit=0, restarts=1),
        pod("mnist", "worker", 1, state="terminated", exit_code=0),
    )
    assert run.state() == "Succeeded"
    assert run.status["restarts"] == 0, "restarts after success are not failures"


def test_worker_exit_1_under_never_fails_with_exit_code_and_pod():
    spec = {"PS": 1, "Worker": 2}
    run = Run(tfjob(replicas=spec))
    run.step(*running("mnist", spec))
    run.step(
        pod("mnist", "ps", 0),
        pod("mnist", "worker", 0),
        pod("mnist", "worker", 1, state="terminated", exit_code=1),
    )
    assert run.state() == "Failed"
    cond = st.find(run.status, "Failed")
    assert cond["reason"] == "TFJobFailed"
    assert "Worker pod mnist-worker-1 exited with code 1 (Error)" in cond["message"]
    assert "restartPolicy Never" in cond["message"]
    assert run.status["failure"] == {
        "replicaType": "Worker",
        "pod": "mnist-worker-1",
        "exitCode": 1,
        "reason": "Error",
    }
    assert run.status["replicaStatuses"]["Worker"]["failed"] == 1
    assert run.replicas("StatefulSet") == {"mnist-ps": 0, "mnist-worker": 0}
    assert ("Warning", "TFJobFailed") in [(t, r) for t, r, _ in run.events]


def test_failure_seen_only_after_the_kubelet_restarted_it_still_fails_under_never():
    spec = {"Worker": 2}
    run = Run(tfjob(replicas=spec))
    run.step(*running("mnist", spec))
    run.step(pod("mnist", "worker", 0), pod("mnist", "worker", 1, last_exit=2, restarts=1))
    assert run.state() == "Failed"
    assert run.status["failure"]["exitCode"] == 2


@pytest.mark.parametrize(
    ("code", "reason", "outcome"),
    [
        (137, "OOMKilled", "Restarting"),
        (143, "Error", "Restarting"),
        (1, "Error", "Failed"),
        (127, "Error", "Failed"),
        (128, "Error", "Restarting"),
    ],
)
def test_exit_code_policy(code, reason, outcome):
    spec = {"Worker": 2}
    run = Run(tfjob(replicas=spec, restart_policy="ExitCode"))
    run.step(*running("mnist", spec))
    run.step(
        pod("mnist", "worker", 0),
        pod("mnist", "worker", 1, state="terminated", exit_code=code, reason=reason),
    )
    assert run.state() == outcome
    if outcome == "Failed":
        assert run.status["failure"]["exitCode"] == code
        assert run.status["restarts"] == 0
    else:
        assert run.status["restarts"] == 1
        assert run.replicas("StatefulSet") == {"mnist-worker": 2}
        assert f"exited with code {code} ({reason})" in st.find(run.status, "Restarting")["message"]


def test_retryable_exit_restarting_then_running_counts_once():
    spec = {"Worker": 2}
    run = Run(tfjob(replicas=spec, restart_policy="ExitCode"))
    run.step(*running("mnist", spec))
    run.step(
        pod("mnist", "worker", 0),
        pod("mnist", "worker", 1, state="terminated", exit_code=137, reason="OOMKilled"),
    )
    assert run.state() == "Restarting"
    for _ in range(2):  # the restarted container, seen twice
        run.step(
            pod("mnist", "worker", 0),
            pod("mnist", "worker", 1, last_exit=137, last_reason="OOMKilled", restarts=1),
        )
        assert run.state() == "Running"
        assert run.status["replicaStatuses"]["Worker"]["restarts"] == 1
        assert run.status["restarts"] == 1
    assert [c["type"] for c in run.status["conditions"]] == ["Created", "Running"]
    assert run.reasons() == ["TFJobCreated", "TFJobRunning", "TFJobRestarting", "TFJobRunning"]


@pytest.mark.parametrize("policy", ["OnFailure", "Always"])
def test_backoff_limit_exceeded(policy):
    spec = {"Worker": 1}
    run = Run(tfjob(replicas=spec, restart_policy=policy, run_policy={"backoffLimit": 1}))
    run.step(pod("mnist", "worker", 0))
    run.step(pod("mnist", "worker", 0, state="terminated", exit_code=1))
    assert run.state() == "Restarting" and run.status["restarts"] == 1
    run.step(pod("mnist", "worker", 0, last_exit=1, restarts=1))
    assert run.state() == "Running"
    run.step(pod("mnist", "worker", 0, state="waiting", last_exit=3, restarts=2))
    assert run.state() == "Failed"
    cond = st.find(run.status, "Failed")
    assert cond["reason"] == "BackoffLimitExceeded"
    assert "2 failure restarts exceed backoffLimit 1" in cond["message"]
    assert run.status["failure"]["exitCode"] == 3


def test_no_backoff_limit_means_restarts_forever():
    run = Run(tfjob(replicas={"Worker": 1}, restart_policy="OnFailure"))
    for n in range(1, 6):
        run.step(pod("mnist", "worker", 0, last_exit=1, restarts=n))
        assert run.state() == "Running"
    assert run.status["restarts"] == 5


def test_exits_missed_while_not_watching_end_as_the_oldest_exit_shown():
    run = Run(tfjob(replicas={"Worker": 1}, restart_policy="OnFailure"))
    run.step(pod("mnist", "worker", 0))
    run.step(pod("mnist", "worker", 0, state="terminated", exit_code=1, last_exit=0, restarts=4))
    assert run.status["restarts"] == 1
    assert run.status["terminations"]["mnist-worker-0"]["count"] == 5


def test_failures_missed_while_the_operator_was_down_count_from_restart_count():
    run = Run(tfjob(replicas={"Worker": 1}, restart_policy="OnFailure"))
    run.step(pod("mnist", "worker", 0))
    # Five failures while nobody watched; the pod shows only the two newest.
    run.step(pod("mnist", "worker", 0, state="terminated", exit_code=1, last_exit=1, restarts=4))
    assert run.status["restarts"] == 5
    assert run.state() == "Restarting"


def test_recreated_pod_starts_a_new_ledger():
    run = Run(tfjob(replicas={"Worker": 1}, restart_policy="OnFailure"))
    run.step(pod("mnist", "worker", 0, last_exit=1, restarts=1))
    assert run.status["restarts"] == 1
    run.step(pod("mnist", "worker", 0, last_exit=1, restarts=1, uid="new"))
    assert run.status["restarts"] == 2


def test_active_deadline():
    run = Run(tfjob(replicas={"Worker": 1}, run_policy={"activeDeadlineSeconds": 60}))
    d = run.step(pod("mnist", "worker", 0))
    assert d.requeue_after == pytest.approx(60)
    d = run.step(pod("mnist", "worker", 0), after=30)
    assert d.requeue_after == pytest.approx(30)
    run.step(pod("mnist", "worker", 0), after=31)
    cond = st.find(run.status, "Failed")
    assert cond["reason"] == "DeadlineExceeded" and "60s" in cond["message"]
    assert "failure" not in run.status
    assert run.replicas("StatefulSet") == {"mnist-worker": 0}


def test_suspend_and_resume():
    spec = {"PS": 1, "Worker": 1}
    body = tfjob(replicas=spec, run_policy={"activeDeadlineSeconds": 600})
    run = Run(body)
    run.step(*running("mnist", spec))
    assert run.state() == "Running"
    body["spec"]["runPolicy"]["suspend"] = True
    run.step(*running("mnist", spec))
    assert run.state() == "Suspended"
    assert st.find(run.status, "Running")["status"] == "False"
    assert run.replicas("StatefulSet") == {"mnist-ps": 0, "mnist-worker": 0}
    run.step(after=1000)  # suspended time does not count towards the deadline
    assert run.state() == "Suspended"
    body["spec"]["runPolicy"]["suspend"] = False
    run.step()
    assert st.find(run.status, "Suspended")["status"] == "False"
    assert st.find(run.status, "Suspended")["reason"] == "TFJobResumed"
    assert run.status["startTime"] == st.timestamp(run.now)
    assert run.replicas("StatefulSet") == {"mnist-ps": 1, "mnist-worker": 1}
    run.step(*running("mnist", spec))
    assert run.state() == "Running"
    assert run.reasons() == [
        "TFJobCreated",
        "TFJobRunning",
        "TFJobSuspended",
        "TFJobResumed",
        "TFJobRunning",
    ]


def test_state_after_a_resume_is_not_suspended():
    body = tfjob(replicas={"Worker": 1})
    run = Run(body)
    run.step()
    body["spec"]["runPolicy"] = {"suspend": True}
    run.step()
    body["spec"]["runPolicy"] = {"suspend": False}
    run.step()
    assert st.find(run.status, "Suspended")["status"] == "False"
    assert run.state() == "Created", "STATE names the newest condition that holds"
    assert run.status["conditions"][-1]["status"] == "True"


@pytest.mark.parametrize(("policy", "replicas"), [("Running", 0), ("All", 0), ("None", 2)])
def test_clean_pod_policy(policy, replicas):
    run = Run(tfjob(replicas={"Worker": 2}, run_policy={"cleanPodPolicy": policy}))
    run.step()
    run.step(pod("mnist", "worker", 0, state="terminated", exit_code=0), pod("mnist", "worker", 1))
    assert run.state() == "Succeeded"
    assert run.replicas("StatefulSet") == {"mnist-worker": replicas}
    assert run.replicas("Service") == {"mnist-worker": 0}, "Services stay until it is deleted"
    assert run.last.children == [], "a finished job's children are only scaled down"


def deleting(p, grace):
    p["metadata"] |= {
        "deletionTimestamp": "2026-01-01T12:00:30Z",
        "deletionGracePeriodSeconds": grace,
    }
    return p


RERUN = {"state": "running", "last_exit": 0, "restarts": 1}


@pytest.mark.parametrize(
    ("pods", "done"),
    [
        # The chief's exit that ends the job, before and after the kubelet runs it again.
        ([pod("mnist", "chief", 0, state="terminated", exit_code=0)], True),
        ([pod("mnist", "chief", 0, **RERUN)], True),
        # The scale-down's deletion gives the rerun the whole grace period: shortened, once.
        ([deleting(pod("mnist", "chief", 0, **RERUN), 30)], True),
        ([deleting(pod("mnist", "chief", 0, **RERUN), 1)], False),
        ([deleting(pod("mnist", "chief", 0, state="terminated", exit_code=0), 0)], False),
        # Tasks that are not done get their grace period: those that serve, those stopped,
        # those running again after a failure.
        ([pod("mnist", "worker", 0)], False),
        ([pod("mnist", "worker", 0, state="terminated", exit_code=201)], False),
        ([pod("mnist", "worker", 0, state="running", last_exit=1, restarts=1)], False),
    ],
)
def test_a_finished_jobs_pods_whose_task_is_done_end_at_once(pods, done):
    spec = {"Chief": 1, "Worker": 1}
    run = Run(tfjob(replicas=spec))
    run.step(*running("mnist", spec))
    run.step(pod("mnist", "chief", 0, state="terminated", exit_code=0), pod("mnist", "worker", 0))
    assert run.state() == "Succeeded"
    d = run.step(*pods)
    assert d.done_pods == (
        [(pods[0]["metadata"]["name"], pods[0]["metadata"]["uid"])] if done else []
    )


def test_done_pods_stay_under_clean_pod_policy_none_and_while_the_job_runs():
    """cleanPodPolicy None keeps every pod; a worker done early waits for the job's end."""
    kept = Run(tfjob(replicas={"Worker": 2}, run_policy={"cleanPodPolicy": "None"}))
    kept.step()
    d = kept.step(
        pod("mnist", "worker", 0, state="terminated", exit_code=0), pod("mnist", "worker", 1)
    )
    assert kept.state() == "Succeeded" and d.done_pods == []
    run = Run(tfjob(replicas={"Worker": 2}, successPolicy="AllWorkers"))
    run.step()
    d = run.step(pod("mnist", "worker", 0, **RERUN), pod("mnist", "worker", 1))
    assert run.state() != "Succeeded" and d.done_pods == []


def test_ttl_after_finished_deletes_the_job():
    run = Run(tfjob(replicas={"Worker": 1}, run_policy={"ttlSecondsAfterFinished": 30}))
    d = run.step(pod("mnist", "worker", 0, state="terminated", exit_code=0))
    assert run.state() == "Succeeded" and not d.delete_job
    assert d.requeue_after == pytest.approx(30)
    d = run.step(after=29)
    assert not d.delete_job and d.requeue_after == pytest.approx(1)
    d = run.step(after=1)
    assert d.delete_job


def test_finished_job_is_final():
    run = Run(tfjob(replicas={"Worker": 1}))
    run.step(pod("mnist", "worker", 0, state="terminated", exit_code=0))
    assert run.state() == "Succeeded"
    d = run.step(pod("mnist", "worker", 0, state="terminated", exit_code=1, restarts=1))
    assert run.state() == "Succeeded" and not d.events and "failure" not in run.status


@pytest.mark.parametrize(
    ("replicas", "spec", "message"),
    [
        ({"PS": 1}, {}, "a job needs a Worker or a Chief"),
        ({"Chief": 2, "Worker": 1}, {}, "at most 1 Chief"),
        ({"Chief": 1, "Master": 1}, {}, "Chief or Master, not both"),
        ({"Worker": 1, "Launcher": 1}, {}, "Launcher: unknown replica type"),
        ({"Worker": 1}, {"successPolicy": "Sometimes"}, "spec.successPolicy"),
    ],
)
def test_invalid_spec_fails_once_with_a_warning(replicas, spec, message):
    run = Run(tfjob(replicas=replicas, **spec))
    d = run.step()
    assert run.state() == "Failed"
    cond = st.find(run.status, "Failed")
    assert cond["reason"] == "InvalidSpec" and message in cond["message"]
    assert d.children == []
    assert ("Warning", "InvalidSpec") in [(t, r) for t, r, _ in d.events]
    again = run.step()
    assert again.patch == {} and again.events == [] and again.children == []


def test_a_job_kubernetes_refused_keeps_its_failed_status_as_written():
    run = Run(tfjob(replicas={"Worker": 1}))
    view = JobView.from_body(run.body).refused("Kubernetes refused a child: port 70000")
    d = decide(view, [], T0, "cluster.local")
    run.body["status"] = d.status
    failed = dict(d.status)
    # The next reconcile reads the same spec as valid: the finished job's status stays put.
    again = run.step()
    assert run.status == failed and again.patch == {} and again.children == []


def test_invalid_name_is_refused():
    run = Run(tfjob(name="a" * 50, replicas={"Worker": 1}))
    run.step()
    assert "too long" in st.find(run.status, "Failed")["message"]


def test_waiting_pods_are_in_status_with_one_warning_each_until_they_run():
    spec = {"PS": 1, "Worker": 1}
    run = Run(tfjob(replicas=spec))
    bad = pod("mnist", "worker", 0, state="waiting", reason="ErrImagePull", message="not found")
    run.step(pod("mnist", "ps", 0), bad)
    assert run.state() == "Created"
    assert run.status["waiting"] == {"mnist-worker-0": "ErrImagePull: not found"}
    warnings = [e for e in run.events if e[1] == "PodWaiting"]
    assert warnings == [
        ("Warning", "PodWaiting", "Pod mnist-worker-0 cannot start: " + "ErrImagePull: not found")
    ]
    # The kubelet's back-off alternates the reason: the status follows, no second Warning.
    backoff = pod("mnist", "worker", 0, state="waiting", reason="ImagePullBackOff")
    d = run.step(pod("mnist", "ps", 0), backoff)
    assert run.status["waiting"] == {"mnist-worker-0": "ImagePullBackOff"}
    assert d.events == []
    d = run.step(pod("mnist", "ps", 0), backoff)
    assert d.patch == {}, "nothing new: nothing written"
    run.step(*running("mnist", spec))
    assert run.state() == "Running"
    assert "waiting" not in run.status
    assert run.last.patch.get("waiting", "absent") is None, "removed from the stored status"


def test_a_finished_job_lists_no_waiting_pods():
    run = Run(tfjob(replicas={"Chief": 1, "Worker": 1}))
    stuck = pod("mnist", "worker", 0, state="waiting", reason="ImagePullBackOff")
    run.step(pod("mnist", "chief", 0), stuck)
    assert "waiting" in run.status
    run.step(pod("mnist", "chief", 0, state="terminated", exit_code=0), stuck)
    assert run.state() == "Succeeded"
    assert "waiting" not in run.status


def test_a_replica_type_removed_from_the_spec_loses_its_children():
    body = tfjob(replicas={"PS": 1, "Worker": 2, "Evaluator": 1})
    run = Run(body)
    run.step()
    assert set(run.replicas("StatefulSet")) == {"mnist-ps", "mnist-worker", "mnist-evaluator"}
    del body["spec"]["tfReplicaSpecs"]["Evaluator"]
    d = run.step()
    assert sorted(d.delete_children) == [
        ("Service", "mnist-evaluator"),
        ("StatefulSet", "mnist-evaluator"),
    ]
    assert set(run.replicas("StatefulSet")) == {"mnist-ps", "mnist-worker"}
    assert run.step().delete_children == []


def test_a_running_job_edited_into_an_invalid_spec_runs_on_and_an_edit_fixes_it():
    """A typo in an edit destroys nothing: the children stay as last applied (nothing applied,
    scaled down or deleted), the pods run on, the status and a Warning say why; the next
    valid edit is applied, and the job goes on."""
    body = tfjob(replicas={"PS": 1, "Worker": 1}, run_policy={"ttlSecondsAfterFinished": 60})
    run = Run(body)
    up = running("mnist", {"PS": 1, "Worker": 1})
    run.step(*up)
    before = run.replicas("StatefulSet")
    body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] = {"x": {}}
    d = run.step(*up)
    assert run.state() == st.Cond.SPEC_REJECTED, "kubectl get tfj shows it"
    assert st.is_true(run.status, st.Cond.RUNNING)
    cond = st.find(run.status, st.Cond.SPEC_REJECTED)
    assert cond["status"] == "True" and cond["reason"] == st.Reason.INVALID_EDIT
    assert "spec.tfReplicaSpecs.Worker.template.spec.containers: must be a list" in cond["message"]
    assert (d.children, d.scale_down, d.delete_children, d.restart_pods) == ([], [], [], [])
    assert not d.delete_job and d.requeue_after is None
    assert [e[:2] for e in d.events] == [("Warning", st.Reason.INVALID_EDIT)]
    assert run.step(*up, after=120).events == [], "said once"

    body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"] = [
        {"name": "tensorflow", "image": "python:3.11"}
    ]
    d = run.step(*up)
    assert st.find(run.status, st.Cond.SPEC_REJECTED)["status"] == "False"
    assert run.replicas("StatefulSet") == before and run.state() == "Running"


def test_an_invalid_new_job_fails_and_honours_its_run_policy():
    body = tfjob(replicas={"Worker": 1}, run_policy={"ttlSecondsAfterFinished": 60})
    body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two"
    run = Run(body)
    d = run.step()
    assert run.state() == "Failed" and d.scale_down == []
    assert "delete and re-create" in st.find(run.status, "Failed")["message"]
    assert d.requeue_after == 60, "ttlSecondsAfterFinished holds for an invalid spec too"
    assert run.step(after=61).delete_job


def test_an_edit_of_a_finished_job_is_answered_once():
    body = tfjob(replicas={"Worker": 1}, run_policy={"cleanPodPolicy": "None"})
    body["metadata"]["generation"] = 1
    body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = ""
    run = Run(body)
    run.step()
    assert st.find(run.status, "Failed")["reason"] == "InvalidSpec"
    body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = "x"
    body["metadata"]["generation"] = 2
    d = run.step()
    (ignored,) = [e for e in d.events if e[1] == "SpecIgnored"]
    assert ignored[0] == "Warning" and "Delete and re-create" in ignored[2]
    assert run.state() == "Failed" and d.children == []
    assert [e for e in run.step().events if e[1] == "SpecIgnored"] == []


def test_what_the_operator_replaces_is_a_warning_once_per_generation():
    body = tfjob(replicas={"Worker": 1})
    body["metadata"]["generation"] = 1
    c = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    c["env"] = [{"name": "TF_CONFIG", "value": "{}"}]
    run = Run(body)
    first = run.step()
    adjusted = [e for e in first.events if e[1] == "SpecAdjusted"]
    assert adjusted == [
        (
            "Warning",
            "SpecAdjusted",
            "spec.tfReplicaSpecs.Worker.template.spec.containers[0].env[0]: TF_CONFIG is set "
            "by the operator; the value given here is replaced",
        )
    ]
    assert run.status["observedGeneration"] == 1
    assert [e for e in run.step().events if e[1] == "SpecAdjusted"] == []


def test_a_persistent_reconcile_error_is_a_condition_until_it_heals():
    run = Run(tfjob(replicas={"Worker": 1}))
    run.step()
    d = run.step(error="403 Forbidden: statefulsets.apps is forbidden")
    cond = st.find(run.status, "ReconcileError")
    assert cond["status"] == "True" and "statefulsets.apps is forbidden" in cond["message"]
    assert run.state() == "ReconcileError"
    assert [(t, r) for t, r, _ in d.events] == [("Warning", "ReconcileError")]
    assert run.step(error="403 Forbidden: statefulsets.apps is forbidden").events == []
    d = run.step()
    assert st.find(run.status, "ReconcileError")["status"] == "False"
    assert [(t, r) for t, r, _ in d.events] == [("Normal", "Reconciled")]
    assert run.state() == "Created"


def test_pods_a_statefulset_cannot_create_are_waiting_with_kubernetes_message():
    run = Run(tfjob(replicas={"PS": 1, "Worker": 2}))
    run.step()
    why = 'pods "mnist-worker-1" is forbidden: error looking up service account x/nope'
    d = run.step(
        pod("mnist", "ps", 0),
        pod("mnist", "worker", 0),
        create_failures={"mnist-worker": why},
    )
    assert run.status["waiting"] == {"mnist-worker-1": f"FailedCreate: {why}"}
    assert [(t, r) for t, r, _ in d.events] == [("Warning", "PodWaiting")]
    run.step(*running("mnist", {"PS": 1, "Worker": 2}))
    assert "waiting" not in run.status


def test_a_spec_that_breaks_our_own_code_is_invalid_not_a_crash(monkeypatch):
    from tfjob_operator.rules.lifecycle import view

    def broken(*_args, **_kw):
        raise KeyError("containers")

    monkeypatch.setattr(view, "build", broken)  # where the spec check renders the templates
    run = Run(tfjob(replicas={"Worker": 1}))
    run.step()
    cond = st.find(run.status, "Failed")
    assert cond["reason"] == "InvalidSpec" and "internal error" in cond["message"]
    assert "KeyError" in cond["message"]


def gang_pod(job, rt, index, *, created, scheduler="volcano", conditions=()):
    """A pod a gang scheduler has to place: pending, no node, maybe no word from it yet."""
    p = pod(job, rt, index)
    p["metadata"]["creationTimestamp"] = st.timestamp(created)
    p["spec"]["schedulerName"] = scheduler
    p["status"] = {"phase": "Pending", "conditions": list(conditions)}
    return p


def test_a_scheduler_that_never_answers_is_named_in_status():
    body = tfjob(replicas={"PS": 1, "Worker": 1})
    run = Run(body)
    pods = [gang_pod("mnist", "ps", 0, created=T0), gang_pod("mnist", "worker", 0, created=T0)]
    d = run.step(*pods, after=5)
    assert "waiting" not in run.status  # a scheduler gets a grace period to act
    assert 25 < d.requeue_after <= 26  # no event will come: look again when it ends
    run.step(*pods, after=26)
    waiting = run.status["waiting"]
    assert set(waiting) == {"mnist-ps-0", "mnist-worker-0"}
    assert waiting["mnist-ps-0"].startswith("NotScheduled: scheduler 'volcano' has not looked")
    assert run.reasons().count("PodWaiting") == 2


def test_a_scheduler_that_answers_is_not_suspected():
    body = tfjob(replicas={"PS": 1, "Worker": 1})
    run = Run(body)
    said = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "gang"}
    pods = [
        gang_pod("mnist", "ps", 0, created=T0, conditions=[said]),
        gang_pod("mnist", "worker", 0, created=T0, scheduler="default-scheduler"),
    ]
    run.step(*pods, after=120)
    # Volcano's own answer is reported as it is; the default scheduler is never suspected.
    assert run.status["waiting"] == {"mnist-ps-0": "Unschedulable: gang"}


def test_pods_coming_up_change_only_the_counts_and_a_successful_life_takes_four_writes():
    """Pods appearing add nothing to the status but counts (no ledger entry per pod that has
    not exited), so the operator can fold them into one write: Created, Running, Succeeded and
    the counts once the pods are gone are all a PS=1, Worker=2 job writes."""
    run = Run(tfjob(replicas={"PS": 1, "Worker": 2}))
    writes = [run.step()]
    assert "Created" in {c["type"] for c in run.status["conditions"]}
    up = [pod("mnist", "ps", 0), pod("mnist", "worker", 0)]
    appearing = run.step(
        *[
            pod("mnist", rt, i, state="waiting", reason="ContainerCreating")
            for rt, i in (("ps", 0), ("worker", 0), ("worker", 1))
        ]
    )
    assert not appearing.patch, "pods that exist but have not run change nothing"
    partial = run.step(*up)
    assert st.counts_only(partial.patch)
    writes.append(run.step(*up, pod("mnist", "worker", 1)))
    assert run.state() == "Running" and not st.counts_only(writes[-1].patch)
    done = pod("mnist", "worker", 0, state="terminated", exit_code=0)
    writes.append(run.step(pod("mnist", "ps", 0), done, pod("mnist", "worker", 1)))
    assert run.state() == "Succeeded"
    assert run.status["terminations"] == {
        "mnist-worker-0": {"uid": "uid-mnist-worker-0", "count": 1, "succeeded": True}
    }
    gone = run.step()
    assert st.counts_only(gone.patch) and run.status["activeReplicas"] == "0/3"
    assert not run.step().patch, "a finished job with its pods gone writes nothing more"


@pytest.mark.parametrize(
    ("spec", "policy", "last", "state", "counts"),
    [
        ({"Chief": 1, "Worker": 1}, "Never", ("chief", 0), "Succeeded", ("Chief", 1, 0)),
        ({"Worker": 2}, "Never", ("worker", 0), "Succeeded", ("Worker", 1, 0)),
        ({"Worker": 2}, "Never", ("worker", 1), "Failed", ("Worker", 0, 1)),
        ({"Chief": 1, "Worker": 1}, "ExitCode", ("worker", 0), "Failed", ("Worker", 0, 1)),
    ],
)
def test_a_verdict_seen_after_the_kubelet_restarted_the_pod_is_counted(
    spec, policy, last, state, counts
):
    """The pod's container runs again (restartPolicy Always) before the operator looks: the
    exit that decides the job is counted all the same, and the finished job's counts keep it."""
    run = Run(tfjob(replicas=spec, restart_policy=policy))
    run.step(*running("mnist", spec))
    rt, i = last
    code = 0 if state == "Succeeded" else 1
    pods = [p for p in running("mnist", spec) if p["metadata"]["name"] != f"mnist-{rt}-{i}"]
    run.step(*pods, pod("mnist", rt, i, last_exit=code, restarts=1))
    assert run.state() == state
    kind, succeeded, failed = counts
    assert run.status["replicaStatuses"][kind] == {
        "active": spec[kind],
        "succeeded": succeeded,
        "failed": failed,
        "restarts": 0,
    }
    run.step()  # scaled down: the counts stay
    assert run.status["replicaStatuses"][kind]["succeeded"] == succeeded
    assert run.status["replicaStatuses"][kind]["failed"] == failed
