"""Kubeflow's TFJobs (`kubeflow.org/v1`) on the operator that serves Kubeflow's group, as the
clients around them use them: Kubeflow's labels on pods and Services, Katib's reading of a
trial, a `runPolicy.managedBy` of another controller, and a job that Kubeflow's training-operator
had already started.

The Kubeflow Training SDK itself drives jobs on the real node
(tests/node/test_kubeflow_tools.py), and so does Kueue's built-in TFJob integration
(tests/node/test_kueue_kubeflow.py).
"""

from __future__ import annotations

import json
from typing import Any

import kubernetes
import pytest

from tests.integration.user_view import CHILD_WAIT, Job
from tfjob_operator.rules import kubeflow
from tfjob_operator.rules import status as st
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.core.paths import ROOT

pytestmark = pytest.mark.integration

KF = "kubeflow.org/v1"


def kf_tfjob(name: str, replicas: dict[str, int], **kwargs: Any) -> dict[str, Any]:
    body = tfjob(name=name, replicas=replicas, **kwargs)
    body["apiVersion"] = KF
    return body


def pods(job: Job, name: str) -> dict[str, Any]:
    sel = f"{kubeflow.JOB_NAME}={name}"
    return {
        p.metadata.name: p for p in job.core.list_namespaced_pod(job.ns, label_selector=sel).items
    }


def kf_labels_done(job: Job, name: str, count: int) -> dict[str, dict[str, str]]:
    """The job's pods' labels, once all `count` carry their replica index."""

    def check() -> dict[str, dict[str, str]] | None:
        got = {n: p.metadata.labels for n, p in pods(job, name).items()}
        done = len(got) == count and all(kubeflow.REPLICA_INDEX in v for v in got.values())
        return got if done else None

    return wait_for(check, CHILD_WAIT, f"{count} pods of {name} with their replica index")


def test_pods_and_services_carry_kubeflows_labels(kf_job, kubelet):
    name = kf_job.create(kf_tfjob("labels", {"PS": 1, "Worker": 2}))
    started = kf_job.wait_pods(name, 3)
    assert all(kubeflow.REPLICA_INDEX not in p.metadata.labels for p in pods(kf_job, name).values())
    kubelet.run_all(started)  # a pod's own labels come once its container has started
    labels = kf_labels_done(kf_job, name, 3)
    assert labels["labels-worker-0"][kubeflow.JOB_ROLE] == "master", "no Chief: worker 0 leads"
    for pod, got in labels.items():
        rt, index = pod.split("-")[1], pod.split("-")[2]
        assert got[kubeflow.REPLICA_TYPE] == rt and got[kubeflow.REPLICA_INDEX] == index
        assert got[kubeflow.OPERATOR_NAME] == "tfjob-controller"
        assert (kubeflow.JOB_ROLE in got) == (pod == "labels-worker-0"), pod
    services = kf_job.core.list_namespaced_service(
        kf_job.ns, label_selector=f"{kubeflow.JOB_NAME}={name}"
    ).items
    assert {s.metadata.name for s in services} == {"labels-ps", "labels-worker"}
    # The children are owned by the Kubeflow TFJob, so they go with it.
    (sts,) = [s for n, s in kf_job.statefulsets(name).items() if n == "labels-worker"]
    (owner,) = sts.metadata.owner_references
    assert (owner.api_version, owner.kind, owner.uid) == (
        KF,
        "TFJob",
        kf_job.get(name)["metadata"]["uid"],
    )


def test_a_pod_made_again_gets_its_labels_again(kf_job, kubelet):
    name = kf_job.create(kf_tfjob("again", {"Chief": 1, "Worker": 1}))
    kubelet.run_all(kf_job.wait_pods(name, 2))
    labels = kf_labels_done(kf_job, name, 2)
    assert labels["again-chief-0"][kubeflow.JOB_ROLE] == "master"
    assert kubeflow.JOB_ROLE not in labels["again-worker-0"], "a Chief leads"
    old = pods(kf_job, name)["again-worker-0"].metadata.uid
    kf_job.core.delete_namespaced_pod("again-worker-0", kf_job.ns)

    def relabelled() -> bool:
        pod = pods(kf_job, name).get("again-worker-0")
        if pod is None or pod.metadata.uid == old:
            return False
        if not pod.status.container_statuses:
            kubelet.set("again-worker-0")  # the new pod's container starts
        return kubeflow.REPLICA_INDEX in (pod.metadata.labels or {})

    wait_for(relabelled, CHILD_WAIT, "the new worker-0 pod with its replica index")


def test_a_job_another_controller_runs_is_left_alone_visibly(kf_job):
    body = kf_tfjob("multi", {"Worker": 2}, run_policy={"managedBy": "kueue.x-k8s.io/multikueue"})
    name = kf_job.create(body)
    (event,) = kf_job.wait_event(name, st.Reason.MANAGED_ELSEWHERE)
    assert event[0] == "Normal" and "kueue.x-k8s.io/multikueue" in event[2]
    # Another job made after it is handled: the operator has looked at "multi" by now.
    other = kf_job.create(kf_tfjob("local", {"Worker": 1}))
    kf_job.wait_condition(other, st.Cond.CREATED)
    assert kf_job.statefulsets(name) == {} and kf_job.services(name) == {}
    assert kf_job.status(name) == {}, "MultiKueue writes this job's status, not us"


def test_a_job_started_by_another_controller_is_not_touched(
    kf_job, kubeflow_operator, custom, core
):
    """A TFJob training-operator had started: its pods and Services exist, owned by the job.
    The operator makes nothing beside them and says why; once they are gone, it takes over."""
    kubeflow_operator.stop()  # the TFJob and its pods exist before this operator does
    try:
        name = kf_job.create(kf_tfjob("moved", {"Worker": 1}))
        job = kf_job.get(name)
        owner = {
            "apiVersion": KF,
            "kind": "TFJob",
            "name": name,
            "uid": job["metadata"]["uid"],
            "controller": True,
        }
        meta = {
            "name": f"{name}-worker-0",
            "labels": {
                kubeflow.JOB_NAME: name,
                kubeflow.REPLICA_TYPE: "worker",
                kubeflow.REPLICA_INDEX: "0",
                kubeflow.OPERATOR_NAME: "tfjob-controller",
            },
            "ownerReferences": [owner],
        }
        container = {"name": "tensorflow", "image": "kubeflow/tf-dist-mnist-test:1.0"}
        core.create_namespaced_pod(
            kf_job.ns, {"metadata": meta, "spec": {"containers": [container]}}
        )
        service = {"clusterIP": "None", "ports": [{"port": 2222}], "selector": meta["labels"]}
        core.create_namespaced_service(kf_job.ns, {"metadata": meta, "spec": service})
        status = {
            "conditions": [
                {"type": "Created", "status": "True", "reason": "TFJobCreated", "message": "x"},
                {"type": "Running", "status": "True", "reason": "TFJobRunning", "message": "x"},
            ],
            "replicaStatuses": {"Worker": {"active": 1, "selector": f"{kubeflow.JOB_NAME}={name}"}},
            "lastReconcileTime": "2026-11-25T00:00:00Z",
        }
        custom.patch_namespaced_custom_object_status(
            "kubeflow.org", "v1", kf_job.ns, "tfjobs", name, {"status": status}
        )
    finally:
        kubeflow_operator.start()

    cond = kf_job.wait_condition(name, st.Cond.STARTED_ELSEWHERE)
    assert cond["status"] == "True" and f"Pod/{name}-worker-0" in cond["message"], cond
    assert f"Service/{name}-worker-0" in cond["message"]
    (event,) = kf_job.wait_event(name, st.Reason.FOREIGN_CHILDREN)
    assert event[0] == "Warning"
    assert kf_job.statefulsets(name) == {}, "nothing of ours beside another controller's pods"
    stored = kf_job.status(name)
    assert stored["replicaStatuses"]["Worker"]["selector"], "Kubeflow's status fields are kept"
    assert stored["lastReconcileTime"] == "2026-11-25T00:00:00Z"

    # Handed over: the other controller's pods and Services are deleted; the next event of the
    # job (here a label a user adds) finds none, and the operator runs the job.
    core.delete_namespaced_pod(f"{name}-worker-0", kf_job.ns, grace_period_seconds=0)
    core.delete_namespaced_service(f"{name}-worker-0", kf_job.ns, _preload_content=False)
    wait_for(lambda: not pods(kf_job, name), CHILD_WAIT, "the foreign pod gone")
    kf_job.kubectl("label", kf_job.resource, name, "-n", kf_job.ns, "handover=now")
    kf_job.wait_replicas(name, {"moved-worker": 1})
    cond = kf_job.condition(name, st.Cond.STARTED_ELSEWHERE)
    assert (cond["status"], cond["reason"]) == ("False", st.Reason.HANDED_OVER)


# Katib's defaults for a TFJob trial (GJSON over the job): success is a Succeeded condition
# with status "True", failure a Failed one; the primary pod is the master's.
KATIB_PRIMARY = {kubeflow.JOB_ROLE: "master"}


def katib_reads(status: dict[str, Any], cond_type: str) -> bool:
    """`status.conditions.#(type=="<cond_type>")#|#(status=="True")#` is non-empty."""
    matching = [c for c in status.get("conditions") or [] if c.get("type") == cond_type]
    return any(c.get("status") == "True" for c in matching)


def test_a_katib_trial_with_a_metrics_sidecar_in_the_chief(kf_job, kubelet):
    """Katib injects a metrics collector into the primary pod; the job's success is still read
    from the tensorflow container, and Katib finds that pod by its labels."""
    body = kf_tfjob("trial", {"Chief": 1, "Worker": 1})
    chief = body["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]
    chief["containers"][0]["name"] = "tensorflow"
    chief["containers"].append(
        {"name": "metrics-logger-and-collector", "image": "katib/file-metrics-collector"}
    )
    name = kf_job.create(body)
    kubelet.run_all(kf_job.wait_pods(name, 2))
    labels = kf_labels_done(kf_job, name, 2)
    primary = [p for p, got in labels.items() if KATIB_PRIMARY.items() <= got.items()]
    assert primary == [f"{name}-chief-0"]
    kf_job.wait_state(name, "Running")
    assert not katib_reads(kf_job.status(name), "Succeeded")
    # The tensorflow container exits 0 while the sidecar still runs.
    kubelet.set(f"{name}-chief-0", state="terminated", exit_code=0)
    status = kf_job.wait_state(name, "Succeeded")
    assert katib_reads(status, "Succeeded") and not katib_reads(status, "Failed")


def test_enable_dynamic_worker_gives_each_worker_a_sparse_tf_config(kf_job):
    """Kubeflow's sparse cluster spec: a worker's TF_CONFIG names every PS and itself only,
    with its own index and address filled in by Kubernetes, keys included."""
    body = kf_tfjob("dynamic", {"PS": 1, "Worker": 2}, enableDynamicWorker=True)
    name = kf_job.create(body)
    sets = wait_for(lambda: len(s := kf_job.statefulsets(name)) == 2 and s, CHILD_WAIT, "2 sets")
    env = sets[f"{name}-worker"].spec.template.spec.containers[0].env
    template = next(e.value for e in env if e.name == "TF_CONFIG")
    expanded = json.loads(template.replace("$(TFJOB_TASK_INDEX)", "1"))

    def address(rt: str, i: int) -> str:
        return f"{name}-{rt}-{i}.{name}-{rt}.{kf_job.ns}.svc.cluster.local:2222"

    assert expanded["cluster"] == {"ps": [address("ps", 0)], "worker": {"1": address("worker", 1)}}
    assert kf_job.get(name)["spec"]["enableDynamicWorker"] is True, "kept, not pruned"
    assert kf_job.get(name)["spec"]["runPolicy"] == {}, "defaulted for Kubeflow's SDK"
    kf_job.wait_condition(name, st.Cond.CREATED)
    assert not [e for e in kf_job.events(name) if e[1] == st.Reason.SPEC_ADJUSTED]


@pytest.mark.smoke
def test_our_extensions_work_in_kubeflows_group(kf_job):
    """checkpoint and tensorboard, on a kubeflow.org TFJob: the claim and the TensorBoard are
    made and owned by it, and the TensorBoard's pods are not among the job's pods for Kubeflow's
    clients."""
    body = kf_tfjob("ext", {"Worker": 1}, checkpoint={"storage": {"size": "1Gi"}}, tensorboard={})
    name = kf_job.create(body)
    uid = kf_job.get(name)["metadata"]["uid"]
    board = wait_for(lambda: kf_job.deployments(name), CHILD_WAIT, "the TensorBoard Deployment")
    (deployment,) = board.values()
    assert [o.uid for o in deployment.metadata.owner_references] == [uid]
    tpl = deployment.spec.template.metadata.labels
    assert kubeflow.JOB_NAME not in tpl, "not a replica pod for the SDK's selectors"
    claim = wait_for(
        lambda: kf_job.core.read_namespaced_persistent_volume_claim(
            f"{name}-checkpoints", kf_job.ns
        ),
        CHILD_WAIT,
        "the checkpoint claim",
    )
    assert [o.api_version for o in claim.metadata.owner_references] == [KF]
    assert kf_job.wait_condition(name, st.Cond.CREATED)["status"] == "True"
    assert kf_job.status(name)["tensorboard"]["service"] == f"{name}-tensorboard"


POLICIES = ROOT / "manifests" / "policies" / "pod-labels.yaml"


def test_each_pod_is_born_with_its_own_labels_under_the_admission_policies(
    job, kubectl, api, operator
):
    """manifests/policies/ (MutatingAdmissionPolicies, 1.36+): a `tfjob.dev` job's pods, which
    the operator never patches, carry their index as they are made, and worker 0 of a job
    without a Chief its master role; a Chief's pod keeps its template's."""
    minor = int(kubernetes.client.VersionApi(api).get_code().minor.rstrip("+"))
    if minor < 36:
        pytest.skip("MutatingAdmissionPolicy is GA from Kubernetes 1.36")
    kubectl("apply", "-f", str(POLICIES))
    try:
        # A policy takes effect once the API server has loaded it: a pod made with dryRun
        # shows when.
        probe = {
            "metadata": {
                "name": "probe",
                "labels": {
                    "app.kubernetes.io/managed-by": "tfjob-operator",
                    kubeflow.POD_INDEX: "0",
                },
                "annotations": {kubeflow.FIRST_ROLE: kubeflow.MASTER_ROLE},
            },
            "spec": {"containers": [{"name": "c", "image": "x"}]},
        }

        def loaded() -> bool:
            made = job.core.create_namespaced_pod(job.ns, probe, dry_run="All")
            return (made.metadata.labels or {}).get(kubeflow.JOB_ROLE) == kubeflow.MASTER_ROLE

        wait_for(loaded, CHILD_WAIT, "the admission policies loaded")
        workers = job.create(tfjob(name="born", replicas={"Worker": 2}))

        def labelled() -> dict[str, dict[str, str]] | None:
            found = {
                p.metadata.name: p.metadata.labels
                for p in job.core.list_namespaced_pod(
                    job.ns, label_selector=f"tfjob.dev/job-name={workers}"
                ).items
            }
            return found if len(found) == 2 else None

        got = wait_for(labelled, CHILD_WAIT, "the workers' pods")
        assert got[f"{workers}-worker-0"][kubeflow.JOB_ROLE] == kubeflow.MASTER_ROLE
        assert kubeflow.JOB_ROLE not in got[f"{workers}-worker-1"]
        for pod, labels in got.items():
            assert labels[kubeflow.REPLICA_INDEX] == pod.rsplit("-", 1)[1]
        chief = job.create(tfjob(name="chiefly", replicas={"Chief": 1, "Worker": 1}))
        pods_ = wait_for(lambda: len(p := job.pods(chief)) == 2 and p, CHILD_WAIT, "pods")
        labels = {p: job.core.read_namespaced_pod(p, job.ns).metadata.labels for p in pods_}
        assert labels[f"{chief}-chief-0"][kubeflow.JOB_ROLE] == kubeflow.MASTER_ROLE
        assert kubeflow.JOB_ROLE not in labels[f"{chief}-worker-0"]
        assert labels[f"{chief}-worker-0"][kubeflow.REPLICA_INDEX] == "0"
    finally:
        kubectl("delete", "-f", str(POLICIES), "--wait")
