"""Gang scheduling on the real API server, with both PodGroup CRDs installed: each scheduler
choice makes its PodGroup and pod fields, and makes the PodGroup again when it is deleted; a
missing CRD and a scheduler that never answers are said in the job's status.

The test of a missing CRD deletes it first if a test before installed it; the others install
both."""

from __future__ import annotations

import json

import kubernetes
import pytest

from tests.integration.user_view import without_crds
from tfjob_operator.rules import status as st
from tfjob_operator.rules.gang import (
    COSCHEDULING_LABEL,
    NATIVE_API,
    VOLCANO_GROUP_ANNOTATION,
    Scheduler,
)
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.core.paths import ROOT
from tfjob_testbed.project.operator import stepped_aside

pytestmark = pytest.mark.integration

CRDS = ROOT / "tests" / "data" / "podgroup-crds.yaml"
POLICY = {
    "minAvailable": 3,
    "queue": "research",
    "priorityClass": "high",
    "scheduleTimeoutSeconds": 90,
}


def gang_job(name: str = "mnist", workers: int = 2) -> dict:
    body = tfjob(
        name=name, replicas={"PS": 1, "Worker": workers}, run_policy={"schedulingPolicy": POLICY}
    )
    for rs in body["spec"]["tfReplicaSpecs"].values():
        rs["template"]["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": "500m", "memory": "1Gi"}
        }
    return body


def pod_group(custom, scheduler: Scheduler, ns: str, name: str) -> dict:
    group, version, plural = scheduler.api
    return custom.get_namespaced_custom_object(group, version, ns, plural, name)


def pod_group_uid(custom, scheduler: Scheduler, ns: str, name: str) -> str | None:
    try:
        return pod_group(custom, scheduler, ns, name)["metadata"]["uid"]
    except kubernetes.client.ApiException as e:
        if e.status == 404:
            return None
        raise


def test_missing_crd_is_said_at_once_and_heals_when_installed(
    operator, control_plane, kubectl, job, custom, ns, tmp_path
):
    without_crds(kubectl, "podgroups.scheduling.volcano.sh")
    with stepped_aside(
        operator, control_plane.kubeconfig, tmp_path / "op.log", ["--gang-scheduler=volcano"]
    ):
        name = job.create(gang_job())
        cond = job.wait_condition(name, st.Cond.RECONCILE_ERROR, timeout=20)
        assert cond["status"] == "True"
        assert "podgroups.scheduling.volcano.sh" in cond["message"]
        assert "install the gang scheduler" in cond["message"]
        job.wait_event(name, st.Reason.RECONCILE_ERROR)
        assert job.statefulsets(name) == {}, "no pod is made outside its gang"

        kubectl("apply", "-f", str(CRDS))
        kubectl.wait_established()
        wait_for(lambda: pod_group(custom, Scheduler.VOLCANO, ns, name), 90, "the PodGroup, healed")
        wait_for(
            lambda: job.condition(name, st.Cond.RECONCILE_ERROR)["status"] == "False",
            30,
            "the error to clear",
        )
        assert set(job.statefulsets(name)) == {"mnist-ps", "mnist-worker"}


@pytest.fixture
def podgroup_crds(kubectl, custom):
    """Both schedulers' PodGroup CRDs, established and served: an API server that has just
    made (or made again) a CRD's storage answers 429 "storage is (re)initializing" for a
    moment, and an operator started then may watch it from before it serves."""
    kubectl("apply", "-f", str(CRDS))
    kubectl.wait_established()
    for scheduler in (Scheduler.VOLCANO, Scheduler.SCHEDULER_PLUGINS):
        api = scheduler.api
        wait_for(
            lambda api=api: custom.list_cluster_custom_object(*api) is not None,
            30,
            f"{api[2]}.{api[0]} served",
        )


@pytest.mark.parametrize(
    ("scheduler", "spec", "pod_scheduler"),
    [
        (
            Scheduler.VOLCANO,
            {
                "minMember": 3,
                "minResources": {"cpu": "1500m", "memory": "3221225472"},
                "queue": "research",
                "priorityClassName": "high",
            },
            "volcano",
        ),
        (
            Scheduler.SCHEDULER_PLUGINS,
            {
                "minMember": 3,
                "minResources": {"cpu": "1500m", "memory": "3221225472"},
                "scheduleTimeoutSeconds": 90,
            },
            "scheduler-plugins-scheduler",
        ),
    ],
)
@pytest.mark.smoke
def test_each_scheduler_gets_its_pod_group_and_pod_fields(
    podgroup_crds,
    operator,
    control_plane,
    kubectl,
    job,
    custom,
    ns,
    tmp_path,
    scheduler,
    spec,
    pod_scheduler,
):
    with stepped_aside(
        operator,
        control_plane.kubeconfig,
        tmp_path / "op.log",
        [f"--gang-scheduler={scheduler.value}"],
    ):
        name = job.create(gang_job())
        uid = job.get(name)["metadata"]["uid"]
        group = wait_for(lambda: pod_group(custom, scheduler, ns, name), 30, "the PodGroup")
        # Read back through the CRD's closed schema: every field we wrote is one it knows.
        assert group["spec"] == spec
        (owner,) = group["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("TFJob", uid, True)

        sets = wait_for(lambda: len(s := job.statefulsets(name)) == 2 and s, 30, "StatefulSets")
        for sts in sets.values():
            pod = sts.spec.template
            assert pod.spec.scheduler_name == pod_scheduler
            if scheduler is Scheduler.VOLCANO:
                assert pod.metadata.annotations[VOLCANO_GROUP_ANNOTATION] == name
            else:
                assert pod.metadata.labels[COSCHEDULING_LABEL] == name
        # The pods exist and name the gang's scheduler.
        for pod in job.wait_pods(name, 3):
            assert job.core.read_namespaced_pod(pod, ns).spec.scheduler_name == pod_scheduler

        # The unused fields of the policy are said once, as a warning.
        adjusted = [m for _, r, m in job.wait_event(name, "SpecAdjusted")]
        unused = "scheduleTimeoutSeconds" if scheduler is Scheduler.VOLCANO else "queue"
        assert any(unused in m for m in adjusted), adjusted

        # More workers: the PodGroup follows.
        patch = {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 3}}}}
        kubectl("patch", "tfj", name, "-n", ns, "--type=merge", "-p", json.dumps(patch))
        wait_for(
            lambda: (
                pod_group(custom, scheduler, ns, name)["spec"]["minMember"] == 3
                and pod_group(custom, scheduler, ns, name)["spec"]["minResources"]["cpu"] == "1500m"
            ),
            30,
            "the PodGroup to be re-applied",
        )

        # The PodGroups of the scheduler in use are watched: one deleted by someone comes back
        # at once, not at the job's next change.
        first = group["metadata"]["uid"]
        kubectl("delete", f"{scheduler.api[2]}.{scheduler.api[0]}", name, "-n", ns)
        wait_for(
            lambda: pod_group_uid(custom, scheduler, ns, name) not in (None, first),
            30,
            "the PodGroup made again",
        )


def test_a_scheduler_that_is_not_running_is_said_in_status(
    podgroup_crds, operator, control_plane, job, ns, tmp_path
):
    """No scheduler runs here: the pods stay Pending with no word from anyone, and after the
    grace period the job says which scheduler it waits for."""
    with stepped_aside(
        operator, control_plane.kubeconfig, tmp_path / "op.log", ["--gang-scheduler=volcano"]
    ):
        name = job.create(gang_job())
        waiting = wait_for(
            lambda: len(w := job.status(name).get("waiting") or {}) == 3 and w,
            90,
            "every pod to be reported waiting",
        )
        for why in waiting.values():
            assert why.startswith("NotScheduled: scheduler 'volcano' has not looked at the pod")
        assert st.state(job.status(name)) == "Created"
        job.wait_event(name, "PodWaiting")


def native_served(kube) -> bool:
    """Whether this API server serves Kubernetes' own gang API (1.37 with the bed's gate), as
    the operator's own discovery reads it."""
    return kube.serves(*NATIVE_API)


def raw_pods(kubectl, ns: str, name: str) -> dict[str, dict]:
    """The job's pods as the API server keeps them, by name (the typed client may predate
    spec.schedulingGroup)."""
    found = kubectl.get_json("pods", "-n", ns, "-l", f"tfjob.dev/job-name={name}")
    return {p["metadata"]["name"]: p for p in found["items"]}


@pytest.mark.smoke
def test_native_gangs_where_served_and_none_where_not(operator, kube, kubectl, job, custom, ns):
    """The operator as installed (--gang-scheduler=auto): on an API server that serves
    scheduling.k8s.io/v1beta1, a Workload and a PodGroup per job (the Evaluator outside it),
    each pod in it, a resize followed; on one that does not (1.28), no gang and nothing
    broken."""
    body = tfjob(name="native", replicas={"Chief": 1, "Worker": 2, "Evaluator": 1})
    name = job.create(body)
    job.wait_pods(name, 4)
    pods = raw_pods(kubectl, ns, name)
    if not native_served(kube):
        assert len(pods) == 4
        assert not any("schedulingGroup" in p["spec"] for p in pods.values())
        error = job.condition(name, st.Cond.RECONCILE_ERROR)
        assert not error or error["status"] == "False", error
        return
    group = pod_group(custom, Scheduler.KUBERNETES, ns, name)
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert group["spec"]["workloadRef"] == {"workloadName": name, "templateName": "tfjob"}
    workload = custom.get_namespaced_custom_object(
        "scheduling.k8s.io", "v1beta1", ns, "workloads", name
    )
    assert workload["spec"]["controllerRef"] == {
        "apiGroup": "tfjob.dev",
        "kind": "TFJob",
        "name": name,
    }
    uid = job.get(name)["metadata"]["uid"]
    for obj in (group, workload):
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["uid"], owner["controller"]) == (uid, True)
    for pod, raw in pods.items():
        # Kept by the API server (with the gate off it drops the field without a word).
        want = None if "-evaluator-" in pod else {"podGroupName": name}
        assert raw["spec"].get("schedulingGroup") == want, pod

    patch = {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 4}}}}
    kubectl("patch", "tfj", name, "-n", ns, "--type=merge", "-p", json.dumps(patch))
    wait_for(
        lambda: (
            pod_group(custom, Scheduler.KUBERNETES, ns, name)["spec"]["schedulingPolicy"]
            == {"gang": {"minCount": 5}}
        ),
        30,
        "the PodGroup's minCount to follow the resize",
    )
    workload = custom.get_namespaced_custom_object(
        "scheduling.k8s.io", "v1beta1", ns, "workloads", name
    )
    assert workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"gang": {"minCount": 5}}


@pytest.mark.smoke
def test_native_gangs_asked_for_where_not_served_are_said(
    operator, control_plane, kube, job, ns, tmp_path
):
    """--gang-scheduler=kubernetes on an API server without the gang API (1.28, or the gate
    off): the job says what to turn on, and no pod is made outside its gang."""
    if native_served(kube):
        pytest.skip("this API server serves scheduling.k8s.io/v1beta1 (the 1.28 pass runs this)")
    with stepped_aside(
        operator, control_plane.kubeconfig, tmp_path / "op.log", ["--gang-scheduler=kubernetes"]
    ):
        name = job.create(tfjob(name="asked", replicas={"Worker": 2}))
        cond = job.wait_condition(name, st.Cond.RECONCILE_ERROR, timeout=20)
        assert cond["status"] == "True"
        assert "GenericWorkload" in cond["message"], cond
        assert "scheduling.k8s.io/v1beta1" in cond["message"], cond
        job.wait_event(name, st.Reason.RECONCILE_ERROR)
        assert job.statefulsets(name) == {}, "no pod is made outside its gang"


def test_a_job_running_outside_a_gang_joins_one_only_when_all_its_pods_are_made_again(
    operator, control_plane, kube, kubelet, kubectl, job, custom, ns, tmp_path
):
    """A job whose pods ran before the operator made gangs (an upgrade; the gate turned on):
    a pod made again alone stays outside the group (inside, it would wait for a gang that
    never forms); once every pod is made again together (a resize restarts them all), the
    job is a gang."""
    if not native_served(kube):
        pytest.skip("needs scheduling.k8s.io/v1beta1 (the 1.37 pass)")
    with stepped_aside(
        operator, control_plane.kubeconfig, tmp_path / "op.log", ["--gang-scheduler=none"]
    ):
        name = job.create(tfjob(name="upgraded", replicas={"Worker": 2}))
        kubelet.run_all(job.wait_pods(name, 2))
        job.wait_state(name, "Running")
    # The operator as installed again (auto: Kubernetes' own gangs). One pod is made again.
    first = raw_pods(kubectl, ns, name)
    kubectl("delete", "pod", "upgraded-worker-1", "-n", ns, "--wait=false")
    again = wait_for(
        lambda: (
            (p := raw_pods(kubectl, ns, name).get("upgraded-worker-1"))
            and p["metadata"]["uid"] != first["upgraded-worker-1"]["metadata"]["uid"]
            and p
        ),
        30,
        "worker 1 made again",
    )
    assert "schedulingGroup" not in again["spec"], "made alone into a group it would wait"
    assert "schedulingGroup" not in raw_pods(kubectl, ns, name)["upgraded-worker-0"]["spec"]

    patch = {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 3}}}}
    kubectl("patch", "tfj", name, "-n", ns, "--type=merge", "-p", json.dumps(patch))

    def all_in_the_gang() -> dict | None:
        pods = raw_pods(kubectl, ns, name)
        live = [p for p in pods.values() if not p["metadata"].get("deletionTimestamp")]
        ok = len(live) == 3 and all(
            p["spec"].get("schedulingGroup") == {"podGroupName": name} for p in live
        )
        return pods if ok else None

    wait_for(all_in_the_gang, 60, "every worker made again in the gang")
    group = pod_group(custom, Scheduler.KUBERNETES, ns, name)
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
