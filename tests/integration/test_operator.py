"""The real operator process against the real API server, driven through a job's whole life.

There is no kubelet: the StatefulSet controller creates Pod objects and the tests write their
container statuses, as a kubelet would, to drive the job.
"""

from __future__ import annotations

import json

import pytest

from tests.integration.user_view import CHILD_WAIT, GC_WAIT
from tfjob_operator.rules import naming
from tfjob_operator.rules import status as st
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import wait_for

pytestmark = pytest.mark.integration


@pytest.mark.smoke
def test_apply_creates_statefulsets_services_pvc_and_tf_config(job, kubectl):
    body = tfjob(
        replicas={"Chief": 1, "PS": 1, "Worker": 2}, checkpoint={"storage": {"size": "1Gi"}}
    )
    name = job.create(body)
    uid = job.get(name)["metadata"]["uid"]
    sts = wait_for(
        lambda: len(s := job.statefulsets(name)) == 3 and s, CHILD_WAIT, "3 StatefulSets"
    )
    svcs = job.services(name)
    assert set(sts) == set(svcs) == {"mnist-chief", "mnist-ps", "mnist-worker"}
    pvc = job.core.read_namespaced_persistent_volume_claim("mnist-checkpoints", job.ns)
    for obj in [*sts.values(), *svcs.values(), pvc]:
        (ref,) = obj.metadata.owner_references
        assert (ref.kind, ref.name, ref.uid, ref.controller) == ("TFJob", name, uid, True)
        assert obj.metadata.labels["app.kubernetes.io/managed-by"] == "tfjob-operator"
    svc = svcs["mnist-worker"]
    assert svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses
    assert [(p.name, p.port, p.protocol) for p in svc.spec.ports] == [("tfjob-port", 2222, "TCP")]
    worker = sts["mnist-worker"].spec
    assert (worker.replicas, worker.service_name, worker.pod_management_policy) == (
        2,
        "mnist-worker",
        "Parallel",
    )

    # The StatefulSet controller made real pods; their env carries the TF_CONFIG template.
    assert job.wait_pods(name, 4) == [
        "mnist-chief-0",
        "mnist-ps-0",
        "mnist-worker-0",
        "mnist-worker-1",
    ]
    pod = job.core.read_namespaced_pod("mnist-worker-1", job.ns)
    env = {e.name: e for e in pod.spec.containers[0].env}
    assert env["TFJOB_TASK_INDEX"].value_from.field_ref.field_path == (
        "metadata.labels['apps.kubernetes.io/pod-index']"
    )
    tf_config = env["TF_CONFIG"].value
    expanded = json.loads(tf_config.replace("$(TFJOB_TASK_INDEX)", "1"))
    assert expanded["task"] == {"type": "worker", "index": 1}
    assert expanded["cluster"]["ps"] == [f"mnist-ps-0.mnist-ps.{job.ns}.svc.cluster.local:2222"]
    assert env["TFJOB_CHECKPOINT_DIR"].value == "/checkpoints"
    mounts = {m.name: m.mount_path for m in pod.spec.containers[0].volume_mounts}
    assert mounts["tfjob-checkpoints"] == "/checkpoints"
    ps = job.core.read_namespaced_pod("mnist-ps-0", job.ns)
    assert "TFJOB_CHECKPOINT_DIR" not in {e.name for e in ps.spec.containers[0].env}

    status = job.wait_state(name, "Created")
    assert status["startTime"] and status["activeReplicas"] == "0/4"
    out = kubectl("get", "tfj", "-n", job.ns)
    assert "STATE" in out and "RESTARTS" in out and name in out


@pytest.mark.smoke
def test_kubectl_explain_describes_the_spec(kubectl, crd):
    def explain():
        proc = kubectl.run("explain", "tfjob.spec.runPolicy.backoffLimit", check=False)
        return proc.returncode == 0 and proc.stdout

    text = wait_for(explain, CHILD_WAIT, "kubectl explain (the CRD schema is published)")
    assert "failure restarts" in text and "BackoffLimitExceeded" in text


@pytest.mark.smoke
def test_chief_exit_0_succeeds_and_scales_down(job, kubelet):
    name = job.create(tfjob(replicas={"Chief": 1, "PS": 1, "Worker": 2}))
    pods = job.wait_pods(name, 4)
    kubelet.run_all(pods)
    job.wait_state(name, "Running")
    kubelet.set("mnist-worker-1", state="terminated", exit_code=0)  # a worker alone decides nothing
    kubelet.set("mnist-chief-0", state="terminated", exit_code=0)
    status = job.wait_state(name, "Succeeded")
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Succeeded", "True"),
    ]
    assert status["completionTime"] and "failure" not in status
    job.wait_replicas(name, {"mnist-chief": 0, "mnist-ps": 0, "mnist-worker": 0})
    wait_for(lambda: job.pods(name) == [], CHILD_WAIT, "pods scaled away")
    assert len(job.services(name)) == 3, "Services stay until the TFJob is deleted"
    want = {"TFJobCreated", "TFJobRunning", "TFJobSucceeded"}
    wait_for(lambda: want <= {r for _, r, _ in job.events(name)}, CHILD_WAIT, f"events {want}")


def test_pod_that_cannot_start_is_named_in_status_with_a_warning(job, kubelet):
    name = job.create(tfjob(replicas={"Worker": 2}))
    pods = job.wait_pods(name, 2)
    kubelet.set(pods[0])
    pull = 'Back-off pulling image "tfjob/trainer:typo"'
    kubelet.set(pods[1], state="waiting", reason="ImagePullBackOff", message=pull)
    status = wait_for(
        lambda: (s := job.status(name)).get("waiting") and s, CHILD_WAIT, "status.waiting"
    )
    assert status["waiting"] == {"mnist-worker-1": f"ImagePullBackOff: {pull}"}
    assert st.state(status) == "Created"
    warning = wait_for(
        lambda: [e for e in job.events(name) if e[1] == "PodWaiting"], CHILD_WAIT, "the event"
    )
    assert warning == [
        (
            "Warning",
            "PodWaiting",
            f"Pod mnist-worker-1 cannot start: {status['waiting']['mnist-worker-1']}",
        )
    ]
    kubelet.set(pods[1])
    status = job.wait_state(name, "Running")
    assert "waiting" not in status, status


def test_worker_exit_1_under_never_fails_with_exit_code_in_status(job, kubelet, kubectl):
    name = job.create(tfjob(replicas={"PS": 1, "Worker": 2}))
    kubelet.run_all(job.wait_pods(name, 3))
    job.wait_state(name, "Running")
    kubelet.set("mnist-worker-1", state="terminated", exit_code=1)
    status = job.wait_state(name, "Failed")
    assert status["failure"] == {
        "replicaType": "Worker",
        "pod": "mnist-worker-1",
        "exitCode": 1,
        "reason": "Error",
    }
    assert "mnist-worker-1 exited with code 1" in st.find(status, "Failed")["message"]
    job.wait_replicas(name, {"mnist-ps": 0, "mnist-worker": 0})
    wide = kubectl("get", "tfj", name, "-n", job.ns, "-o", "wide")
    assert "EXITCODE" in wide and wide.split()[-1] == "1"
    events = wait_for(
        lambda: [e for e in job.events(name) if e[1] == "TFJobFailed"],
        CHILD_WAIT,
        "a TFJobFailed event",
    )
    assert events[0][0] == "Warning"


def test_retryable_exits_restart_then_run_until_backoff_limit(job, kubelet):
    name = job.create(
        tfjob(replicas={"Worker": 2}, restart_policy="ExitCode", run_policy={"backoffLimit": 1})
    )
    kubelet.run_all(job.wait_pods(name, 2))
    job.wait_state(name, "Running")
    kubelet.set("mnist-worker-1", state="terminated", exit_code=137, reason="OOMKilled")
    status = job.wait_state(name, "Restarting")
    assert status["restarts"] == 1
    assert "exited with code 137 (OOMKilled)" in st.find(status, "Restarting")["message"]
    kubelet.set("mnist-worker-1", last_exit=137, last_reason="OOMKilled", restarts=1)
    status = job.wait_state(name, "Running")
    assert status["replicaStatuses"]["Worker"]["restarts"] == 1
    assert job.statefulsets(name)["mnist-worker"].spec.replicas == 2
    kubelet.set("mnist-worker-0", state="terminated", exit_code=143)
    status = job.wait_state(name, "Failed")
    assert st.find(status, "Failed")["reason"] == "BackoffLimitExceeded"
    assert status["restarts"] == 2
    assert status["failure"]["pod"] == "mnist-worker-0" and status["failure"]["exitCode"] == 143


@pytest.mark.smoke
def test_suspend_scales_to_zero_and_resume_brings_pods_back(job, kubelet, kubectl):
    name = job.create(tfjob(replicas={"PS": 1, "Worker": 1}))
    kubelet.run_all(job.wait_pods(name, 2))
    job.wait_state(name, "Running")
    job.suspend(name, True)
    status = job.wait_state(name, "Suspended")
    assert st.find(status, "Running")["status"] == "False"
    job.wait_replicas(name, {"mnist-ps": 0, "mnist-worker": 0})
    wait_for(lambda: job.pods(name) == [], CHILD_WAIT, "suspended pods gone")
    job.suspend(name, False)
    job.wait_replicas(name, {"mnist-ps": 1, "mnist-worker": 1})
    kubelet.run_all(job.wait_pods(name, 2))
    status = job.wait_state(name, "Running")
    assert st.find(status, "Suspended")["reason"] == "TFJobResumed"


@pytest.mark.smoke
def test_schema_errors_are_refused_by_the_api_server(job, kubectl):
    body = tfjob(replicas={"Worker": 1})
    body["metadata"]["namespace"] = job.ns
    body["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"
    proc = kubectl.run("apply", "-f", "-", input=json.dumps(body), check=False)
    assert proc.returncode != 0
    assert "restartPolicy" in proc.stderr and "Unsupported value" in proc.stderr


@pytest.mark.smoke
@pytest.mark.parametrize(
    "checkpoint", [{}, {"claimName": "ckpt", "storage": {"size": "1Gi"}}], ids=["none", "both"]
)
def test_a_checkpoint_with_both_or_no_source_is_refused_by_the_crds_cel_rule(
    job, kubectl, checkpoint
):
    body = tfjob(replicas={"Worker": 1})
    body["metadata"]["namespace"] = job.ns
    body["spec"]["checkpoint"] = checkpoint
    proc = kubectl.run("apply", "-f", "-", input=json.dumps(body), check=False)
    assert proc.returncode != 0
    assert "spec.checkpoint" in proc.stderr, proc.stderr
    assert "set exactly one of claimName or storage" in proc.stderr, proc.stderr


def test_semantic_errors_fail_with_invalid_spec_and_a_warning_event(job, operator):
    name = job.create(tfjob(name="two-chiefs", replicas={"Chief": 2, "Worker": 1}))
    status = job.wait_state(name, "Failed")
    cond = st.find(status, "Failed")
    assert cond["reason"] == "InvalidSpec" and "at most 1 Chief" in cond["message"]
    events = wait_for(
        lambda: [e for e in job.events(name) if e[1] == "InvalidSpec"],
        CHILD_WAIT,
        "InvalidSpec event",
    )
    assert events[0][0] == "Warning"
    assert job.statefulsets(name) == {} and job.services(name) == {}
    # No hot loop: the status is written once and stays.
    rv = job.get(name)["metadata"]["resourceVersion"]
    job.kubectl("annotate", "tfj", name, "-n", job.ns, "poke=1")
    after = wait_for(
        lambda: job.get(name)["metadata"]["annotations"].get("poke") and job.get(name),
        CHILD_WAIT,
        "annotation",
    )
    assert after["status"] == status and after["metadata"]["resourceVersion"] != rv


@pytest.mark.smoke
def test_deleting_the_job_removes_every_child(job, kubectl):
    name = job.create(
        tfjob(replicas={"PS": 1, "Worker": 1}, checkpoint={"storage": {"size": "1Gi"}})
    )
    job.wait_pods(name, 2)
    kubectl("delete", "tfj", name, "-n", job.ns, "--wait=false")
    wait_for(
        lambda: not job.statefulsets(name) and not job.services(name),
        GC_WAIT,
        "StatefulSets and Services garbage-collected",
    )
    wait_for(lambda: not job.pods(name), GC_WAIT, "pods garbage-collected")

    read = lambda: job.core.read_namespaced_persistent_volume_claim("mnist-checkpoints", job.ns)  # noqa: E731
    wait_for(lambda: job.gone(read), GC_WAIT, "checkpoint claim garbage-collected")


def test_deleted_child_is_recreated(job, kubectl):
    name = job.create(tfjob(replicas={"PS": 1, "Worker": 1}))
    job.wait_pods(name, 2)
    kubectl("delete", "service", "mnist-ps", "-n", job.ns)
    wait_for(lambda: "mnist-ps" in job.services(name), CHILD_WAIT, "Service recreated")


def test_deleted_tensorboard_is_recreated(job, kubectl):
    """The TensorBoard's Deployment is watched like every other child: deleted by someone, it
    comes back at once, not at the job's next change (its pods' events alone re-apply nothing)."""
    body = tfjob(
        replicas={"Chief": 1, "Worker": 1},
        checkpoint={"storage": {"size": "1Gi"}},
        tensorboard={},
    )
    name = job.create(body)
    board = naming.tensorboard_name(name)

    def uid() -> str | None:
        found = job.deployments(name).get(board)
        return found.metadata.uid if found is not None else None

    first = wait_for(uid, CHILD_WAIT, "the TensorBoard Deployment")
    kubectl("delete", "deployment", board, "-n", job.ns)
    wait_for(lambda: uid() not in (None, first), CHILD_WAIT, "the TensorBoard Deployment recreated")


def test_reconcile_is_idempotent_no_writes_for_no_change(job, kubelet):
    name = job.create(tfjob(replicas={"PS": 1, "Worker": 2}))
    kubelet.run_all(job.wait_pods(name, 3))
    job.wait_state(name, "Running")
    status = job.status(name)
    before = written(job.statefulsets(name))
    job.kubectl("annotate", "tfj", name, "-n", job.ns, "poke=1")  # wakes the reconcile
    kubelet.set("mnist-ps-0")  # and so does a pod event
    wait_for(
        lambda: job.get(name)["metadata"].get("annotations", {}).get("poke"),
        CHILD_WAIT,
        "annotation seen",
    )
    assert written(job.statefulsets(name)) == before and job.status(name) == status


def written(statefulsets) -> dict:
    """What a write to a StatefulSet's spec or metadata changes: its generation and the
    managedFields entries outside the status subresource (the StatefulSet controller's own status
    writes still move the resourceVersion while the pods settle)."""
    return {
        n: (
            s.metadata.generation,
            sorted(
                (f.manager, f.operation, str(f.time), str(f.fields_v1))
                for f in s.metadata.managed_fields or []
                if f.subresource != "status"
            ),
        )
        for n, s in statefulsets.items()
    }


def test_active_deadline_fails_the_job(job, kubelet):
    name = job.create(tfjob(replicas={"Worker": 1}, run_policy={"activeDeadlineSeconds": 2}))
    kubelet.run_all(job.wait_pods(name, 1))
    status = job.wait_state(name, "Failed", timeout=30)
    assert st.find(status, "Failed")["reason"] == "DeadlineExceeded"
    job.wait_replicas(name, {"mnist-worker": 0})


def test_ttl_after_finished_deletes_the_job(job, kubelet):
    name = job.create(tfjob(replicas={"Worker": 1}, run_policy={"ttlSecondsAfterFinished": 1}))
    kubelet.set(job.wait_pods(name, 1)[0], state="terminated", exit_code=0)

    wait_for(lambda: job.gone(lambda: job.get(name)), 30, "TFJob deleted by its TTL")


@pytest.mark.smoke
def test_operator_killed_mid_job_converges_without_duplicates(job, kubelet, operator):
    name = job.create(
        tfjob(replicas={"Chief": 1, "PS": 1, "Worker": 2}, restart_policy="OnFailure")
    )
    kubelet.run_all(job.wait_pods(name, 4))
    job.wait_state(name, "Running")
    operator.kill()
    try:
        # While it is down, a worker fails and restarts, and the chief finishes.
        kubelet.set("mnist-worker-0", last_exit=1, restarts=1)
        kubelet.set("mnist-chief-0", state="terminated", exit_code=0)
    finally:
        operator.start()
    status = job.wait_state(name, "Succeeded")
    assert status["restarts"] == 1
    job.wait_replicas(name, {"mnist-chief": 0, "mnist-ps": 0, "mnist-worker": 0})
    assert sorted(job.statefulsets(name)) == ["mnist-chief", "mnist-ps", "mnist-worker"]
    assert sorted(job.services(name)) == ["mnist-chief", "mnist-ps", "mnist-worker"]
    # Events are posted after the status write, in the background: wait for the first.
    job.wait_event(name, "TFJobSucceeded")
    succeeded = [e for e in job.events(name) if e[1] == "TFJobSucceeded"]
    assert len(succeeded) == 1


def test_a_field_dropped_while_the_operator_was_down_goes_from_the_children(job, operator):
    """The first apply after a start is a plain one; when it changes a StatefulSet made by a
    create, the fields the create set are taken over as applied, so what the edit dropped
    goes (left owned by the create, it would stay)."""
    body = tfjob(replicas={"Worker": 1})
    container = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "KEEP", "value": "1"}, {"name": "DROP", "value": "2"}]
    name = job.create(body)
    job.wait_condition(name, "Created")

    def env() -> list[str]:
        sts = job.statefulsets(name).get("mnist-worker")
        containers = sts.spec.template.spec.containers if sts else []
        return [e.name for e in containers[0].env or []] if containers else []

    wait_for(lambda: "DROP" in env(), CHILD_WAIT, "the worker StatefulSet with its env")
    operator.kill()
    try:
        edit = [
            {
                "op": "replace",
                "path": "/spec/tfReplicaSpecs/Worker/template/spec/containers/0/env",
                "value": [{"name": "KEEP", "value": "1"}],
            }
        ]
        job.kubectl(
            "patch", job.resource, name, "-n", job.ns, "--type=json", "-p", json.dumps(edit)
        )
    finally:
        operator.start()
    wait_for(lambda: "DROP" not in env(), CHILD_WAIT, "DROP to go from the worker's env")
    assert "KEEP" in env()


def test_children_kubernetes_refuses_fail_the_job_once(job):
    body = tfjob(name="bad-port", replicas={"Worker": 1})
    container = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["ports"] = [{"name": "tfjob-port", "containerPort": 70000}]
    name = job.create(body)
    status = job.wait_state(name, "Failed")
    cond = st.find(status, "Failed")
    assert cond["reason"] == "InvalidSpec" and "Kubernetes refused a child" in cond["message"]
    assert "70000" in cond["message"]
    events = wait_for(
        lambda: [e for e in job.events(name) if e[1] == "InvalidSpec"],
        CHILD_WAIT,
        "InvalidSpec event",
    )
    assert events[0][0] == "Warning"
    rv = job.get(name)["metadata"]["resourceVersion"]
    job.kubectl("annotate", "tfj", name, "-n", job.ns, "poke=1")
    after = wait_for(
        lambda: (g := job.get(name))["metadata"].get("annotations", {}).get("poke") and g,
        CHILD_WAIT,
        "annotation",
    )
    assert after["status"] == status and after["metadata"]["resourceVersion"] != rv
