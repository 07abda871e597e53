"""Every TFJob a user can apply either runs or says why: the classes of input that once left a
job without a status, on the real API server with the real operator process.

A job "runs" here when its StatefulSets exist with what the spec asked for; "says why" is a
condition with a message that names the field, and a Warning Event, in `kubectl describe`.
"""

from __future__ import annotations

import json

import kubernetes
import pytest

from tests.integration.user_view import CHILD_WAIT
from tfjob_operator.rules import status as st
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def no_traceback(operator):
    """Whatever a test feeds it, the operator logs no traceback and does not restart."""
    start, starts = operator.log.stat().st_size, operator.starts
    yield
    with operator.log.open(errors="replace") as f:
        f.seek(start)
        tracebacks = [ln for ln in f if "Traceback" in ln]
    assert tracebacks == [], "the operator logged a traceback"
    assert operator.proc.poll() is None and operator.starts == starts


def container(body, rt="Worker"):
    return body["spec"]["tfReplicaSpecs"][rt]["template"]["spec"]["containers"][0]


def invalid(job, body, *fragments):
    """Apply `body`; it must fail as InvalidSpec with every fragment in the message, once."""
    name = job.create(body)
    status = job.wait_state(name, "Failed")
    cond = st.find(status, "Failed")
    assert cond["reason"] == "InvalidSpec", cond
    for fragment in fragments:
        assert fragment in cond["message"], cond["message"]
    assert "delete and re-create" in cond["message"]
    events = job.wait_event(name, "InvalidSpec")
    assert [e[0] for e in events] == ["Warning"]
    return name, cond["message"]


def sts_container(job, name, sts):
    found = wait_for(lambda: job.statefulsets(name).get(sts), CHILD_WAIT, f"StatefulSet {sts}")
    return found.spec.template.spec.containers[0]


# --- 1. numeric or malformed quantities --------------------------------------------------------


def test_numeric_quantities_as_kubeflow_writes_them_run(job):
    body = tfjob(name="numeric", replicas={"PS": 1, "Worker": 1})
    container(body)["resources"] = {
        "limits": {"cpu": 1, "memory": "1Gi", "nvidia.com/gpu": 2},
        "requests": {"cpu": 0.5, "nvidia.com/gpu": 2},
    }
    name = job.create(body)
    c = sts_container(job, name, "numeric-worker")
    assert c.resources.limits == {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}
    assert c.resources.requests == {"cpu": "500m", "nvidia.com/gpu": "2"}
    job.wait_pods(name, 2)
    assert st.state(job.wait_state(name, "Created")) == "Created"


def test_a_malformed_quantity_names_the_field(job):
    body = tfjob(name="gb", replicas={"Worker": 1})
    container(body)["resources"] = {"limits": {"memory": "4GB"}}
    invalid(
        job,
        body,
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.limits.memory: "
        "'4GB' is not a Kubernetes quantity",
    )
    assert job.statefulsets("gb") == {}


# --- 2. duplicates that server-side apply refuses ---------------------------------------------


def test_two_containers_of_one_name_are_refused(job):
    body = tfjob(name="twins", replicas={"Worker": 1})
    tpl = body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    tpl["containers"].append({"name": "tensorflow", "image": "other"})
    invalid(job, body, "spec.tfReplicaSpecs.Worker.template.spec.containers[1]: same name as [0]")


def test_an_env_name_twice_runs_with_the_last_value_and_a_warning(job):
    body = tfjob(name="envtwice", replicas={"Worker": 1})
    container(body)["env"] = [{"name": "LR", "value": "0.1"}, {"name": "LR", "value": "0.2"}]
    name = job.create(body)
    c = sts_container(job, name, "envtwice-worker")
    assert [(e.name, e.value) for e in c.env if e.name == "LR"] == [("LR", "0.2")]
    (warning,) = job.wait_event(name, "SpecAdjusted")
    assert warning[0] == "Warning" and "LR is set twice" in warning[2]


def test_a_user_port_2222_is_reused_and_a_user_tf_config_replaced_with_a_warning(job):
    body = tfjob(name="port", replicas={"Worker": 1})
    container(body)["ports"] = [{"name": "grpc", "containerPort": 2222}]
    container(body)["env"] = [{"name": "TF_CONFIG", "value": "{}"}]
    name = job.create(body)
    c = sts_container(job, name, "port-worker")
    assert [(p.name, p.container_port) for p in c.ports] == [("grpc", 2222)]
    tf_config = next(e.value for e in c.env if e.name == "TF_CONFIG")
    assert json.loads(tf_config.replace("$(TFJOB_TASK_INDEX)", "0"))["task"]["type"] == "worker"
    (warning,) = job.wait_event(name, "SpecAdjusted")
    assert "TF_CONFIG is set by the operator; the value given here is replaced" in warning[2]


def test_a_user_mount_at_the_checkpoint_path_is_refused(job):
    body = tfjob(name="mounts", replicas={"Worker": 1}, checkpoint={"storage": {"size": "1Gi"}})
    body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"] = [
        {"name": "scratch", "emptyDir": {}}
    ]
    container(body)["volumeMounts"] = [{"name": "scratch", "mountPath": "/checkpoints"}]
    invalid(
        job,
        body,
        "spec.tfReplicaSpecs.Worker.template.spec.containers[0].volumeMounts[0]: /checkpoints "
        "is where the checkpoint volume goes",
    )


# --- 3. wrong shapes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        (
            "cmap",
            lambda tpl: tpl.update(containers={"tensorflow": {"image": "x"}}),
            "spec.tfReplicaSpecs.Worker.template.spec.containers: must be a list, not a map",
        ),
        (
            "envmap",
            lambda tpl: tpl["containers"][0].update(env={"LR": "0.1"}),
            "spec.tfReplicaSpecs.Worker.template.spec.containers[0].env: must be a list",
        ),
        (
            "portmap",
            lambda tpl: tpl["containers"][0].update(ports={"tfjob-port": 2222}),
            "spec.tfReplicaSpecs.Worker.template.spec.containers[0].ports: must be a list",
        ),
        (
            "portstr",
            lambda tpl: tpl["containers"][0].update(ports=[{"containerPort": "grpc"}]),
            "containers[0].ports[0].containerPort: must be an integer, not a string",
        ),
        (
            "portnone",
            lambda tpl: tpl["containers"][0].update(ports=[{"name": "tfjob-port"}]),
            "containers[0].ports[0].containerPort: required",
        ),
        (
            "typo",
            lambda tpl: tpl["containers"][0].update(imagePullPolcy="Always"),
            "containers[0].imagePullPolcy: unknown field; did you mean 'imagePullPolicy'?",
        ),
    ],
)
@pytest.mark.smoke
def test_wrong_shapes_are_invalid_specs_that_name_the_field(job, name, change, message):
    body = tfjob(name=name, replicas={"Worker": 1})
    change(body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"])
    invalid(job, body, message)
    assert job.statefulsets(name) == {}


# --- 4. too big ----------------------------------------------------------------------------------


@pytest.mark.smoke
def test_a_million_replicas_are_refused_by_the_schema(job):
    # Before the operator spends any memory on them (it read such a job for 10 s and 1.9 GB).
    with pytest.raises(AssertionError, match="less than or equal to 10000"):
        job.create(tfjob(name="million", replicas={"PS": 1, "Worker": 10**6}))  # kubectl apply


def test_a_tf_config_no_container_could_start_with_fails_the_job(job):
    # 5000 workers' addresses make a TF_CONFIG over Linux's 128 KiB bound on one environment
    # string: the containers could never start. Said before anything is rendered.
    name, _ = invalid(
        job, tfjob(name="huge", replicas={"PS": 1, "Worker": 5000}), "5001 tasks make a TF_CONFIG"
    )
    assert job.statefulsets(name) == {}


def test_a_child_someone_else_made_is_not_taken_over_and_is_said(job, core):
    # A user's own Service under the name the job's would have: left as it is (an owner
    # reference added to it would have it deleted with the TFJob), and the job says why.
    service = {
        "metadata": {"name": "taken-worker", "labels": {"team": "mine"}},
        "spec": {"ports": [{"port": 80}], "selector": {"app": "mine"}},
    }
    core.create_namespaced_service(job.ns, service)
    name = job.create(tfjob(name="taken", replicas={"Worker": 1}))
    cond = job.wait_condition(name, "ReconcileError")
    assert cond["status"] == "True" and "does not take it over" in cond["message"], cond
    assert "Service " + job.ns + "/taken-worker" in cond["message"]
    (warning,) = job.wait_event(name, "ReconcileError")
    assert warning[0] == "Warning"
    theirs = core.read_namespaced_service("taken-worker", job.ns)
    assert not theirs.metadata.owner_references and theirs.metadata.labels == {"team": "mine"}
    assert [p.port for p in theirs.spec.ports] == [80]
    core.delete_namespaced_service("taken-worker", job.ns)
    job.kubectl("annotate", "tfj", name, "-n", job.ns, "nudge=1")  # or wait for the backoff
    job.wait_pods(name, 1)


@pytest.mark.smoke
def test_a_field_this_cluster_does_not_know_fails_the_job_with_the_servers_words(job, api):
    # Pod-level resources are in the newest PodSpec (so our reading accepts them) but not in
    # a release before 1.32. A new job's children are created with strict field validation,
    # which such a release answers 400 "unknown field" (its server-side apply would answer 500
    # "failed to create typed patch object"): no retry heals it. The oldest release the
    # project claims is such a one.
    minor = int(kubernetes.client.VersionApi(api).get_code().minor.rstrip("+"))
    if minor >= 32:
        pytest.skip(f"Kubernetes 1.{minor} knows every field of the operator's pod schema")
    body = tfjob(name="newer", replicas={"Worker": 1})
    body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["resources"] = {
        "limits": {"cpu": "1"}
    }
    invalid(
        job, body, "Kubernetes refused a child", "spec.template.spec.resources", "unknown field"
    )


# --- 5. pods that can never be created ----------------------------------------------------------


def test_a_missing_service_account_is_named_in_status_until_it_exists(job, kubectl):
    body = tfjob(name="nosa", replicas={"Worker": 2})
    body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["serviceAccountName"] = "trainer"
    name = job.create(body)
    status = wait_for(
        lambda: (s := job.status(name)).get("waiting") and s, CHILD_WAIT, "status.waiting"
    )
    assert set(status["waiting"]) == {"nosa-worker-0", "nosa-worker-1"}
    for why in status["waiting"].values():
        assert why.startswith("FailedCreate: ") and 'serviceaccount "trainer" not found' in why
    events = job.wait_event(name, "PodWaiting")
    assert {e[0] for e in events} == {"Warning"}
    assert any("nosa-worker-0 cannot start: FailedCreate" in e[2] for e in events)
    kubectl("create", "serviceaccount", "trainer", "-n", job.ns)
    job.wait_pods(name, 2)
    wait_for(lambda: "waiting" not in job.status(name), CHILD_WAIT, "status.waiting to clear")


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        (
            "noimage",
            lambda c, tpl: c.pop("image"),
            "spec.tfReplicaSpecs.Worker.template.spec.containers[0].image: required",
        ),
        (
            "novolume",
            lambda c, tpl: c.update(volumeMounts=[{"name": "data", "mountPath": "/data"}]),
            "containers[0].volumeMounts[0]: mounts volume 'data', which "
            "spec.tfReplicaSpecs.Worker.template.spec.volumes does not define",
        ),
        (
            "halfgpu",
            lambda c, tpl: c.update(resources={"limits": {"nvidia.com/gpu": 0.5}}),
            "resources.limits['nvidia.com/gpu']: 0.5 is not a whole number",
        ),
    ],
)
def test_pods_that_could_never_be_created_are_refused_up_front(job, name, change, message):
    body = tfjob(name=name, replicas={"Worker": 1})
    change(container(body), body["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"])
    invalid(job, body, message)


# --- 6. jobs that can never finish ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "replicas", "spec", "message"),
    [
        ("idlechief", {"Chief": 0, "PS": 1}, {}, "Chief has 0 replicas, so worker 0 decides"),
        ("allnone", {"Chief": 1, "PS": 1}, {"successPolicy": "AllWorkers"}, "has no workers"),
    ],
)
def test_jobs_that_could_never_finish_are_invalid(job, name, replicas, spec, message):
    invalid(job, tfjob(name=name, replicas=replicas, **spec), message)


# --- 7. edits -----------------------------------------------------------------------------------


def patch(job, name, spec):
    job.kubectl("patch", "tfj", name, "-n", job.ns, "--type=merge", "-p", json.dumps(spec))


def test_an_edit_with_a_numeric_cpu_and_more_replicas_is_applied(job, kubelet):
    name = job.create(tfjob(name="grow", replicas={"PS": 1, "Worker": 1}))
    kubelet.run_all(job.wait_pods(name, 2))
    job.wait_state(name, "Running")
    tpl = {"spec": {"containers": [{"name": "tensorflow", "image": "python:3.11"}]}}
    tpl["spec"]["containers"][0]["resources"] = {"limits": {"cpu": 1}}
    patch(job, name, {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 2, "template": tpl}}}})
    job.wait_replicas(name, {"grow-ps": 1, "grow-worker": 2})
    c = job.statefulsets(name)["grow-worker"].spec.template.spec.containers[0]
    assert c.resources.limits == {"cpu": "1"}
    assert st.find(job.status(name), "Failed") is None


def test_removing_a_replica_type_removes_its_children(job):
    name = job.create(tfjob(name="shrink", replicas={"Worker": 1, "Evaluator": 1}))
    job.wait_pods(name, 2)
    patch(job, name, {"spec": {"tfReplicaSpecs": {"Evaluator": None}}})
    wait_for(
        lambda: (
            set(job.statefulsets(name)) == {"shrink-worker"}
            and set(job.services(name)) == {"shrink-worker"}
        ),
        CHILD_WAIT,
        "the Evaluator's StatefulSet and Service gone",
    )


def test_a_running_job_edited_into_an_invalid_spec_runs_on_until_an_edit_fixes_it(job, kubelet):
    """A typo in an edit destroys nothing: not applied, the StatefulSets stay as they were,
    the pods run on, the job says why; the next valid edit is applied."""
    name = job.create(tfjob(name="broken", replicas={"PS": 1, "Worker": 1}))
    kubelet.run_all(job.wait_pods(name, 2))
    job.wait_state(name, "Running")

    def uids() -> set[str]:
        return {job.core.read_namespaced_pod(p, job.ns).metadata.uid for p in job.pods(name)}

    pods = uids()
    patch(job, name, {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 0}}}})
    cond = job.wait_condition(name, "SpecRejected")
    assert cond["status"] == "True" and cond["reason"] == "InvalidEdit", cond
    assert "could never finish" in cond["message"] and "runs on" in cond["message"]
    (warning,) = job.wait_event(name, "InvalidEdit")
    assert warning[0] == "Warning"
    assert not job.condition(name, "Failed")
    assert {n: s.spec.replicas for n, s in job.statefulsets(name).items()} == {
        "broken-ps": 1,
        "broken-worker": 1,
    }
    assert uids() == pods
    patch(job, name, {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 1}}}})
    wait_for(
        lambda: job.condition(name, "SpecRejected")["status"] == "False",
        CHILD_WAIT,
        "SpecRejected to turn False",
    )
    job.wait_event(name, "SpecAccepted")
    assert st.state(job.status(name)) == "Running"


def test_state_after_a_resume_is_not_suspended(job, kubectl):
    name = job.create(tfjob(name="resume", replicas={"Worker": 1}))
    job.wait_pods(name, 1)
    job.suspend(name, True)
    job.wait_state(name, "Suspended")
    job.suspend(name, False)
    wait_for(
        lambda: (job.condition(name, "Suspended") or {}).get("status") == "False",
        CHILD_WAIT,
        "the resume",
    )
    got = kubectl("get", "tfj", name, "-n", job.ns, "--no-headers").split()
    assert got[1] == "Created", got


# --- 8. after InvalidSpec -------------------------------------------------------------------------


def test_fixing_a_failed_spec_says_to_recreate_the_job(job):
    body = tfjob(name="fixed", replicas={"Worker": 1})
    container(body)["resources"] = {"limits": {"memory": "4GB"}}
    name, _ = invalid(job, body, "'4GB' is not a Kubernetes quantity")
    patch(
        job,
        name,
        {
            "spec": {
                "tfReplicaSpecs": {
                    "Worker": {
                        "template": {
                            "spec": {
                                "containers": [
                                    {"name": "tensorflow", "image": "x", "resources": {}}
                                ]
                            }
                        }
                    }
                }
            }
        },
    )
    (ignored,) = job.wait_event(name, "SpecIgnored")
    assert ignored[0] == "Warning" and "Delete and re-create the TFJob" in ignored[2]
    assert st.state(job.status(name)) == "Failed" and job.statefulsets(name) == {}


# --- errors that heal ---------------------------------------------------------------------------


def test_a_persistent_reconcile_error_is_a_condition_and_clears_when_it_heals(job, kubectl):
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-services", "namespace": job.ns},
        "spec": {"hard": {"services": "0"}},
    }
    kubectl.apply(quota)
    wait_for(
        lambda: (
            kubectl.get_json("resourcequota", "no-services", "-n", job.ns)
            .get("status", {})
            .get("hard")
        ),
        CHILD_WAIT,
        "the quota's status",
    )
    name = job.create(tfjob(name="quota", replicas={"Worker": 1}))
    cond = job.wait_condition(name, "ReconcileError")
    assert cond["status"] == "True" and "exceeded quota" in cond["message"], cond
    (warning,) = job.wait_event(name, "ReconcileError")
    assert warning[0] == "Warning" and "exceeded quota" in warning[2]
    kubectl("delete", "resourcequota", "no-services", "-n", job.ns)
    job.kubectl("annotate", "tfj", name, "-n", job.ns, "nudge=1")  # or wait for the backoff
    job.wait_pods(name, 1)
    wait_for(
        lambda: job.condition(name, "ReconcileError")["status"] == "False",
        CHILD_WAIT,
        "ReconcileError to turn False",
    )
    job.wait_event(name, "Reconciled")
    assert st.state(job.status(name)) == "Created"


def test_an_invalid_job_honours_ttl_seconds_after_finished(job):
    body = tfjob(name="ttl", replicas={"Worker": 1}, run_policy={"ttlSecondsAfterFinished": 2})
    container(body)["resources"] = {"limits": {"memory": "4GB"}}
    name = job.create(body)
    job.wait_event(name, "InvalidSpec")
    wait_for(lambda: job.gone(lambda: job.get(name)), 30, "the invalid TFJob deleted by its TTL")
