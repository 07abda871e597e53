"""Kueue itself on the real node: its manager built from its release's Go module, installed with
its own chart (webhooks and its default integrations, the pod and statefulset ones included),
configured as docs/production.md says. The operator runs from its chart with `kueue.enabled`.
Nothing here writes a Workload's status: Kueue's scheduler queues, admits, preempts and places
the jobs, and its controllers evict and requeue them. After each scenario the ClusterQueues'
own figures (admitted, reserving, pending) are held to the jobs' states.

Prints one `CHAOS` line for docs/development.md's table."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from tests.node.addons import Addons
from tests.node.cluster_reads import (
    POD_WAIT,
    RESTORED,
    STEP,
    STOPPED,
    TRAIN_WAIT,
    assert_scaled_down,
    fast_job,
    follow,
    helm_operator,
    job_pods,
    newest_step,
    wait_ended,
    wait_halfway_past_a_checkpoint,
)
from tfjob_operator.api.spec import GROUP, PLURAL
from tfjob_operator.rules import kueue as rules
from tfjob_operator.rules import status as st
from tfjob_testbed.addons import kueue_install
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.operator_cluster import NAMESPACE, OperatorCluster

pytestmark = pytest.mark.node
TOLERATION = {"key": "tfjob.dev/kueue-test", "operator": "Exists", "effect": "NoSchedule"}
# Kueue's waitForPodsReady (on by default, 30 minutes) made short enough to be seen here, with a
# short backoff and one requeue before Kueue deactivates a Workload whose pods never start.
PODS_READY = {
    "waitForPodsReady": {
        "timeout": "60s",
        "recoveryTimeout": "60s",
        "requeuingStrategy": {
            "timestamp": "Eviction",
            "backoffBaseSeconds": 5,
            "backoffMaxSeconds": 10,
            "backoffLimitCount": 1,
        },
    }
}
# Admission fair sharing between the LocalQueues of a ClusterQueue that asks for it: usage
# sampled every second, so that one short job makes its queue the heavier one.
FAIR_SHARING = {"admissionFairSharing": {"usageHalfLifeTime": "10m", "usageSamplingInterval": "1s"}}
RACK = "tfjob.dev/test-rack"
HOSTNAME = "kubernetes.io/hostname"
NO_IMAGE = "docker.io/tfjob-operator/no-such-image:0"
# Kubeflow's release, installed for the run by an earlier module, serves `tfjob` too.
TFJOBS = f"{PLURAL}.{GROUP}"


def create(cluster: OperatorCluster, *bodies: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(bodies))


@pytest.fixture(scope="module")
def node_name(cluster: OperatorCluster) -> str:
    return cluster.get("nodes")["items"][0]["metadata"]["labels"][HOSTNAME]


@pytest.fixture(scope="module")
def bed(
    cluster: OperatorCluster, addons: Addons, node_name: str
) -> Iterator[dict[str, dict[str, Any]]]:
    """Kueue running with this module's configuration (installed once per run), two
    ResourceFlavors (any Linux node; this very node, with a toleration) and a topology-aware one
    (the node in a rack), and the operator with `kueue.enabled`; all but Kueue undone
    afterwards."""
    cluster.kubectl("label", "node", node_name, f"{RACK}=rack-1", "--overwrite")
    specs = {
        "on-demand": {"nodeLabels": {"kubernetes.io/os": "linux"}},
        "spot": {"nodeLabels": {HOSTNAME: node_name}, "tolerations": [TOLERATION]},
        "racks": {"nodeLabels": {RACK: "rack-1"}, "topologyName": "racks"},
    }
    try:
        addons.kueue(PODS_READY | FAIR_SHARING)
        create(
            cluster,
            kueue_install.topology("racks", [RACK, HOSTNAME]),
            *(kueue_install.flavor(name, spec) for name, spec in specs.items()),
        )
        helm_operator(cluster, "kueue.enabled=true")
        yield specs
    finally:
        helm_operator(cluster, "kueue.enabled=false")
        made = [f"resourceflavors.{kueue_install.GROUP}/{name}" for name in specs]
        cluster.kubectl("delete", *made, f"topologies.{kueue_install.GROUP}/racks",
                        "--ignore-not-found", "--wait=false", check=False)  # fmt: skip
        cluster.kubectl("label", "node", node_name, f"{RACK}-", check=False)


@pytest.fixture
def cluster_objects(cluster: OperatorCluster) -> Iterator[Callable[..., None]]:
    """Creates cluster-scoped Kueue objects for one test, and deletes them after it."""
    made: list[tuple[str, str]] = []

    def make(*bodies: dict[str, Any]) -> None:
        create(cluster, *bodies)
        made.extend(
            (b["kind"].lower() + "s." + kueue_install.GROUP, b["metadata"]["name"]) for b in bodies
        )

    yield make
    for kind, name in reversed(made):
        cluster.kubectl("delete", kind, name, "--wait=false", check=False)


# ---- reading Kueue's side ---------------------------------------------------------------------


def workloads(cluster: OperatorCluster, namespace: str) -> list[dict[str, Any]]:
    return cluster.get("workloads.kueue.x-k8s.io", "-n", namespace).get("items") or []


def workload_of(cluster: OperatorCluster, namespace: str, job: str) -> dict[str, Any]:
    """The job's Workload ({} while there is none); fails if there are several, or if Kueue made
    one of its own for a child (its owner is not the job)."""
    mine = []
    for w in workloads(cluster, namespace):
        owners = [(o["kind"], o["name"]) for o in w["metadata"].get("ownerReferences") or []]
        assert ("TFJob", job) in owners or all(o[1] != job for o in owners), owners
        if ("TFJob", job) in owners:
            mine.append(w)
        else:
            assert not any(o[1].startswith(f"{job}-") for o in owners), (
                f"Kueue made a Workload for a child of {job}: {owners}"
            )
    assert len(mine) <= 1, [w["metadata"]["name"] for w in mine]
    return mine[0] if mine else {}


def holds(
    cluster: OperatorCluster, namespace: str, job: str, type_: str, status: str = "True"
) -> Any:
    """The job's Workload once its condition `type_` has `status`, else None."""
    wl = workload_of(cluster, namespace, job)
    return wl if kueue_install.condition(wl, type_).get("status") == status else None


def queue_figures(cluster: OperatorCluster, cq: str) -> tuple[int, int, int]:
    """The ClusterQueue's own (admitted, reserving, pending) Workload counts."""
    status = cluster.get("clusterqueues.kueue.x-k8s.io", cq).get("status") or {}
    return tuple(
        status.get(k, 0) for k in ("admittedWorkloads", "reservingWorkloads", "pendingWorkloads")
    )  # type: ignore[return-value]


def reserved(cluster: OperatorCluster, cq: str) -> dict[str, dict[str, str]]:
    """What the ClusterQueue holds reserved, flavor -> resource -> total, zeros left out."""
    status = cluster.get("clusterqueues.kueue.x-k8s.io", cq).get("status") or {}
    return {
        f["name"]: got
        for f in status.get("flavorsReservation") or []
        if (got := {r["name"]: r["total"] for r in f["resources"] if r["total"] not in ("0", 0)})
    }


def assert_figures(cluster: OperatorCluster, cq: str, admitted: int, pending: int) -> None:
    """Kueue's figures agree with the jobs: `admitted` Workloads hold quota, `pending` wait,
    and nothing else is reserved."""
    wait_for(
        lambda: (
            queue_figures(cluster, cq) == (admitted, admitted, pending)
            and (admitted or reserved(cluster, cq) == {})
        ),
        POD_WAIT,
        f"ClusterQueue {cq}: {admitted} admitted and reserving, {pending} pending",
    )


def assert_not_taken_over(cluster: OperatorCluster, namespace: str, job: str) -> None:
    """Kueue's pod and statefulset integrations left the job's children alone: no admission
    gate, no queue label of their own, no Warning that they took one."""
    for pod in job_pods(cluster, namespace, job):
        gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
        assert "kueue.x-k8s.io/admission" not in gates, (pod["metadata"]["name"], gates)
        assert "kueue.x-k8s.io/managed" not in (pod["metadata"].get("labels") or {})
    sets = cluster.get("statefulsets", "-n", namespace, "-l", f"tfjob.dev/job-name={job}")
    for s in sets["items"]:
        assert rules.QUEUE_LABEL not in (s["metadata"].get("labels") or {}), s["metadata"]
    events = cluster.get(
        "events", "-n", namespace, "--field-selector", f"involvedObject.name={job}"
    )
    assert not [e for e in events["items"] if e["reason"] == st.Reason.KUEUE_TOOK_OVER_CHILD]


def job_condition(cluster: OperatorCluster, namespace: str, job: str, type_: str) -> dict[str, Any]:
    conditions = cluster.tfjob_status(job, namespace).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


def small(name: str, queue: str | None, steps: int = 60, cpu: str = "100m") -> dict[str, Any]:
    """One worker (MultiWorkerMirrored on its own) for a few steps, requesting `cpu`."""
    job = fast_job(name, "mnist-sync", f"--steps={steps}")
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1
    return requesting(job, queue, cpu)


def requesting(job: dict[str, Any], queue: str | None, cpu: str) -> dict[str, Any]:
    if queue:
        job["metadata"].setdefault("labels", {})[rules.QUEUE_LABEL] = queue
    for rs in job["spec"]["tfReplicaSpecs"].values():
        rs["template"]["spec"]["containers"][0]["resources"] = {
            "requests": {"cpu": cpu, "memory": "256Mi"}
        }
    return job


QUOTA = {"cpu": "1", "memory": "8Gi"}
NONE = {"cpu": "0", "memory": "0"}
RECLAIM: dict[str, Any] = {
    "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}
}


# ---- the scenarios ----------------------------------------------------------------------------


@pytest.mark.smoke
def test_borrowing_job_preempted_by_another_team_resumes_on_another_flavor(
    cluster: OperatorCluster,
    namespace: str,
    bed: dict[str, dict[str, Any]],
    cluster_objects: Callable[..., None],
) -> None:
    """Team A's job waits while no quota is free; runs on on-demand capacity borrowed from team
    B; is preempted when team B's higher-priority job reclaims it; goes on from its checkpoint
    on spot capacity, and finishes. Kueue's pod and statefulset integrations stay off its
    children throughout."""
    a, b = f"{namespace}-a", f"{namespace}-b"
    cluster_objects(
        kueue_install.cluster_queue(a, {"on-demand": NONE, "spot": NONE}, cohort=namespace),
        kueue_install.cluster_queue(b, {"on-demand": NONE}, cohort=namespace, **RECLAIM),
        kueue_install.priority_class(f"{namespace}-high", 1000),
    )
    create(
        cluster,
        kueue_install.local_queue("team-a", namespace, a),
        kueue_install.local_queue("team-b", namespace, b),
    )
    # 4 pods of 150m, and below team B's 450m: together above the 1 CPU team B's quota holds, so
    # B reclaims it; each job alone fits beside kind's control-plane pods on a 2-core node.
    job = requesting(fast_job("queued", "mnist-ps", "--steps=600"), "team-a", "150m")
    cluster.apply(job, namespace)

    # Queued: no quota anywhere, so a pending Workload and no pod.
    wl = wait_for(lambda: workload_of(cluster, namespace, "queued"), POD_WAIT, "the Workload")
    assert {p["name"]: p["count"] for p in wl["spec"]["podSets"]} == {
        "chief": 1,
        "ps": 1,
        "worker": 2,
    }
    assert_figures(cluster, a, admitted=0, pending=1)
    assert job_condition(cluster, namespace, "queued", "Suspended")["reason"] == "Queued"
    assert job_pods(cluster, namespace, "queued") == []

    # Team B's on-demand quota appears: team A borrows it, and trains.
    cluster_objects(
        kueue_install.cluster_queue(b, {"on-demand": QUOTA}, cohort=namespace, **RECLAIM)
    )
    first = follow(cluster, "queued-chief-0", namespace)
    admitted = wait_for(lambda: holds(cluster, namespace, "queued", "PodsReady"), POD_WAIT,
                        "PodsReady")  # fmt: skip
    # Spot capacity for team A, once it holds on-demand: where it goes when preempted.
    cluster_objects(
        kueue_install.cluster_queue(a, {"on-demand": NONE, "spot": QUOTA}, cohort=namespace)
    )
    flavors = {f for p in admitted["status"]["admission"]["podSetAssignments"]
               for f in p["flavors"].values()}  # fmt: skip
    assert flavors == {"on-demand"}
    assert kueue_install.condition(admitted, "PodsReady")["reason"] == "Started"
    assert_figures(cluster, a, admitted=1, pending=0)
    wait_halfway_past_a_checkpoint(first)
    assert_not_taken_over(cluster, namespace, "queued")
    # Kueue admitted it, and Kubernetes placed it as one gang (the bed serves the gang API).
    group = cluster.get("podgroups.scheduling.k8s.io", "queued", "-n", namespace)
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}, group
    for pod in job_pods(cluster, namespace, "queued"):
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": "queued"}

    # Team B's job, of a higher priority, reclaims its quota: team A's pods stop.
    first_uid = {
        name: cluster.get("pod", f"queued-{name}-0", "-n", namespace)["metadata"]["uid"]
        for name in ("chief", "worker")
    }
    urgent = small("urgent", "team-b", cpu="450m")
    urgent["metadata"]["labels"][rules.PRIORITY_LABEL] = f"{namespace}-high"
    cluster.apply(urgent, namespace)
    before = first.wait(POD_WAIT)
    reached = newest_step(before)
    # Saved at the step it was on as its pods were stopped, not at the last checkpoint.
    saved = int(STOPPED.search(before).group(1))
    assert saved >= reached, before[-3000:]
    preempted = next(
        c for c in cluster.get("events", "-n", namespace)["items"]
        if c["reason"] == "Preempted" and c["involvedObject"]["name"] == wl["metadata"]["name"]
    )  # fmt: skip
    assert "reclaim" in preempted["message"].lower() or "cohort" in preempted["message"].lower()

    # Admitted again at once, on spot: the pods come back there, and resume from the checkpoint.
    # The pods made again after the admission, not the ones it stopped, which may still be
    # going (a parameter-server job's worker serves until its chief has left).
    def made_again(task: str) -> dict[str, Any] | None:
        found = cluster.get("pod", f"queued-{task}-0", "-n", namespace)  # {}: none yet
        uid = found.get("metadata", {}).get("uid")
        return found if uid not in (None, first_uid[task]) else None

    wait_for(lambda: made_again("chief"), POD_WAIT, "the chief's new pod")
    second = follow(cluster, "queued-chief-0", namespace)
    worker = wait_for(lambda: made_again("worker"), POD_WAIT, "the worker's new pod")
    placed = worker["spec"]
    assert placed["nodeSelector"] == bed["spot"]["nodeLabels"]
    assert TOLERATION in placed["tolerations"]
    again = wait_for(lambda: holds(cluster, namespace, "queued", "PodsReady"), POD_WAIT,
                     "PodsReady again")  # fmt: skip
    # Through WaitForStart (the start timeout), not WaitForRecovery: a new admission.
    assert kueue_install.condition(again, "PodsReady")["reason"] == "Started"
    assert kueue_install.condition(again, "Evicted")["status"] == "False"
    status = wait_ended(cluster, "queued", namespace, log=second)
    log = second.wait()
    restored = RESTORED.search(log)
    assert restored, log[-3000:]
    at = int(restored.group(2))
    assert at == saved, (saved, restored.group(0))
    steps = [int(s) for s in STEP.findall(log)]
    assert steps and steps[0] > at and steps[-1] == 600, log[-3000:]
    lost = max(0, reached - at)
    assert lost == 0, (reached, at)
    assert status["restarts"] == 0 and not status.get("failure"), status
    assert status["lastStop"]["cause"] == "Evicted" and status["lastStop"]["savedStep"] == at
    wait_ended(cluster, "urgent", namespace)

    # Finished: both Workloads say so, and neither queue holds anything.
    finished = wait_for(lambda: holds(cluster, namespace, "queued", "Finished"), POD_WAIT,
                        "the Workload Finished")  # fmt: skip
    assert kueue_install.condition(finished, "Finished")["reason"] == "Succeeded"
    assert_figures(cluster, a, admitted=0, pending=0)
    assert_figures(cluster, b, admitted=0, pending=0)
    assert_not_taken_over(cluster, namespace, "queued")
    fault = "Kueue preemption (cohort reclaim), re-admitted on another flavor"
    print(f"\nCHAOS fault={fault!r} steps_lost={lost} restarts={status['restarts']}")


def test_a_suspended_job_gives_its_quota_back_and_queues_again_on_resume(
    cluster: OperatorCluster, namespace: str, bed: Any, cluster_objects: Callable[..., None]
) -> None:
    cq = f"{namespace}-q"
    cluster_objects(kueue_install.cluster_queue(cq, {"on-demand": QUOTA}))
    create(cluster, kueue_install.local_queue("team", namespace, cq))
    # Created suspended: queued, never admitted.
    held = small("held", "team")
    held["spec"]["runPolicy"]["suspend"] = True
    cluster.apply(held, namespace)
    wl = wait_for(lambda: workload_of(cluster, namespace, "held"), POD_WAIT, "held's Workload")
    assert wl["spec"]["active"] is False
    # A running job suspended by its user: the Workload is deactivated and the quota freed.
    cluster.apply(small("pause", "team", steps=2000), namespace)
    wait_for(lambda: holds(cluster, namespace, "pause", "PodsReady"), POD_WAIT, "pause running")
    assert_figures(cluster, cq, admitted=1, pending=0)
    uid = workload_of(cluster, namespace, "pause")["metadata"]["uid"]
    suspend = json.dumps({"spec": {"runPolicy": {"suspend": True}}})
    cluster.kubectl("patch", TFJOBS, "pause", "-n", namespace, "--type=merge", "-p", suspend)
    wait_for(lambda: holds(cluster, namespace, "pause", "Evicted"), POD_WAIT, "pause evicted")
    assert_scaled_down(cluster, "pause", namespace)
    wait_for(lambda: job_pods(cluster, namespace, "pause") == [], POD_WAIT, "pause's pods gone")
    # held and pause are both inactive: Kueue counts neither, and holds no quota.
    assert_figures(cluster, cq, admitted=0, pending=0)
    assert holds(cluster, namespace, "held", "QuotaReserved") is None
    # Resumed: the same Workload, active again, admitted again; the job finishes.
    resume = json.dumps({"spec": {"runPolicy": {"suspend": False}}})
    cluster.kubectl("patch", TFJOBS, "held", "-n", namespace, "--type=merge", "-p", resume)
    wait_ended(cluster, "held", namespace)
    cluster.kubectl("patch", TFJOBS, "pause", "-n", namespace, "--type=merge", "-p", resume)
    wait_for(lambda: holds(cluster, namespace, "pause", "PodsReady"), POD_WAIT, "pause again")
    assert workload_of(cluster, namespace, "pause")["metadata"]["uid"] == uid
    cluster.kubectl("delete", TFJOBS, "pause", "-n", namespace)
    assert_figures(cluster, cq, admitted=0, pending=0)


def test_a_priority_change_is_taken_in_place_and_restarts_nothing(
    cluster: OperatorCluster, namespace: str, bed: Any, cluster_objects: Callable[..., None]
) -> None:
    cq, pc = f"{namespace}-q", f"{namespace}-prio"
    cluster_objects(
        kueue_install.cluster_queue(cq, {"on-demand": QUOTA}), kueue_install.priority_class(pc, 10)
    )
    create(cluster, kueue_install.local_queue("team", namespace, cq))
    job = small("prio", "team", steps=100_000)
    job["metadata"]["labels"][rules.PRIORITY_LABEL] = pc
    cluster.apply(job, namespace)
    wl = wait_for(lambda: holds(cluster, namespace, "prio", "PodsReady"), POD_WAIT, "running")
    assert wl["spec"]["priority"] == 10
    pod_uid = cluster.get("pod", "prio-worker-0", "-n", namespace)["metadata"]["uid"]
    # The admin raises the class: Kueue updates the Workload's priority in place.
    cluster_objects(kueue_install.priority_class(pc, 500))
    wait_for(
        lambda: workload_of(cluster, namespace, "prio")["spec"].get("priority") == 500,
        POD_WAIT,
        "the new priority",
    )
    # New operator pods (an upgrade, a failover) read the class afresh. An edit that changes
    # nothing Kueue reads shows when they have reconciled the job (its observedGeneration).
    cluster.kubectl("rollout", "restart", "deployment", "-n", NAMESPACE)
    cluster.kubectl("rollout", "status", "deployment", "-n", NAMESPACE, "--timeout=300s")
    ttl = json.dumps({"spec": {"runPolicy": {"ttlSecondsAfterFinished": 600}}})
    cluster.kubectl("patch", TFJOBS, "prio", "-n", namespace, "--type=merge", "-p", ttl)
    generation = cluster.get(TFJOBS, "prio", "-n", namespace)["metadata"]["generation"]
    wait_for(
        lambda: cluster.tfjob_status("prio", namespace).get("observedGeneration") == generation,
        POD_WAIT,
        "the new operator to reconcile the job",
    )
    after = workload_of(cluster, namespace, "prio")
    assert after["metadata"]["uid"] == wl["metadata"]["uid"]
    assert kueue_install.condition(after, "Evicted").get("status") != "True"
    assert job_condition(cluster, namespace, "prio", "Running").get("status") == "True"
    assert cluster.get("pod", "prio-worker-0", "-n", namespace)["metadata"]["uid"] == pod_uid
    assert cluster.tfjob_status("prio", namespace).get("restarts", 0) == 0
    cluster.kubectl("delete", TFJOBS, "prio", "-n", namespace)
    assert_figures(cluster, cq, admitted=0, pending=0)


def test_without_a_priority_class_the_cluster_default_one_counts(
    cluster: OperatorCluster, namespace: str, bed: Any, cluster_objects: Callable[..., None]
) -> None:
    cq, pc = f"{namespace}-q", f"{namespace}-default"
    cluster_objects(kueue_install.cluster_queue(cq, {"on-demand": QUOTA}))
    create(cluster, kueue_install.local_queue("team", namespace, cq))
    default = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": pc},
        "value": 700,
        "globalDefault": True,
    }
    create(cluster, default)
    try:
        cluster.apply(small("plain", "team"), namespace)
        wl = wait_for(lambda: workload_of(cluster, namespace, "plain"), POD_WAIT, "the Workload")
        assert wl["spec"].get("priority") == 700
        assert (wl["spec"].get("priorityClassRef") or {}).get("name") == pc
        wait_ended(cluster, "plain", namespace)
    finally:
        cluster.kubectl("delete", "priorityclass", pc, check=False)


def test_an_edit_of_a_queued_job_updates_its_workload_in_place(
    cluster: OperatorCluster, namespace: str, bed: Any, cluster_objects: Callable[..., None]
) -> None:
    cq = f"{namespace}-q"
    cluster_objects(
        kueue_install.cluster_queue(cq, {"on-demand": NONE}, queueingStrategy="StrictFIFO")
    )
    create(cluster, kueue_install.local_queue("team", namespace, cq))
    cluster.apply(small("first", "team", cpu="500m"), namespace)
    wl = wait_for(lambda: workload_of(cluster, namespace, "first"), POD_WAIT, "first's Workload")
    cluster.apply(small("second", "team", cpu="500m"), namespace)
    wait_for(lambda: workload_of(cluster, namespace, "second"), POD_WAIT, "second's Workload")
    assert_figures(cluster, cq, admitted=0, pending=2)
    # The first job's user asks for less CPU while it waits: its Workload is updated in place.
    edited = small("first", "team", cpu="400m")
    cluster.apply(edited, namespace)

    def updated() -> dict[str, Any] | None:
        now = workload_of(cluster, namespace, "first")
        podset = now["spec"]["podSets"][0]["template"]["spec"]["containers"][0]
        return now if podset["resources"]["requests"]["cpu"] == "400m" else None

    now = wait_for(updated, POD_WAIT, "first's Workload updated")
    assert now["metadata"]["uid"] == wl["metadata"]["uid"]
    assert now["metadata"]["creationTimestamp"] == wl["metadata"]["creationTimestamp"]
    # Room for both: each runs, one after the other.
    cluster_objects(kueue_install.cluster_queue(cq, {"on-demand": {"cpu": "500m", "memory": "8Gi"}},
                                        queueingStrategy="StrictFIFO"))  # fmt: skip
    wait_ended(cluster, "first", namespace)
    wait_ended(cluster, "second", namespace)
    assert workload_of(cluster, namespace, "first")["metadata"]["uid"] == wl["metadata"]["uid"]
    assert_figures(cluster, cq, admitted=0, pending=0)


def test_topology_aware_placement_by_kueue(
    cluster: OperatorCluster, namespace: str, bed: Any, node_name: str,
    cluster_objects: Callable[..., None],
) -> None:  # fmt: skip
    """A replica type that asks for one rack: Kueue's topology request has it, and Kueue's
    ungater places the gated pods on the domain it assigned."""
    cq = f"{namespace}-q"
    cluster_objects(kueue_install.cluster_queue(cq, {"racks": QUOTA}))
    create(cluster, kueue_install.local_queue("team", namespace, cq))
    job = small("racked", "team")
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
    template = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    template.setdefault("metadata", {})["annotations"] = {
        "kueue.x-k8s.io/podset-required-topology": RACK
    }
    cluster.apply(job, namespace)
    wl = wait_for(lambda: workload_of(cluster, namespace, "racked"), POD_WAIT, "the Workload")
    request = wl["spec"]["podSets"][0]["topologyRequest"]
    assert request["required"] == RACK
    assert request["podIndexLabel"] == "apps.kubernetes.io/pod-index"
    admitted = wait_for(lambda: holds(cluster, namespace, "racked", "Admitted"), POD_WAIT,
                        "admitted")  # fmt: skip
    assignment = admitted["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    assert assignment, admitted["status"]["admission"]
    pods = wait_for(lambda: len(p := job_pods(cluster, namespace, "racked")) == 2 and p,
                    POD_WAIT, "the pods")  # fmt: skip
    for pod in pods:
        assert pod["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "worker"
        assert pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == wl["metadata"]["name"]

    # Kueue's ungater took the topology gate off, with the node selector of the domain.
    def placed() -> bool:
        pods = job_pods(cluster, namespace, "racked")
        return len(pods) == 2 and all(
            not p["spec"].get("schedulingGates") and p["spec"].get("nodeName") == node_name
            for p in pods
        )

    wait_for(placed, POD_WAIT, "the pods ungated and placed")
    wait_ended(cluster, "racked", namespace)
    assert_figures(cluster, cq, admitted=0, pending=0)


def test_pods_that_never_start_are_evicted_requeued_then_deactivated(
    cluster: OperatorCluster, namespace: str, bed: Any, cluster_objects: Callable[..., None]
) -> None:
    """waitForPodsReady: a job whose image is missing is evicted after the timeout, requeued
    once after the backoff, then deactivated; the job says why, and keeps no quota."""
    cq = f"{namespace}-q"
    cluster_objects(kueue_install.cluster_queue(cq, {"on-demand": QUOTA}))
    create(cluster, kueue_install.local_queue("team", namespace, cq))
    job = small("stuck", "team")
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = NO_IMAGE
    cluster.apply(job, namespace)
    wait_for(lambda: holds(cluster, namespace, "stuck", "Admitted"), POD_WAIT, "admitted")
    wl = wait_for(
        lambda: (
            (w := workload_of(cluster, namespace, "stuck"))
            and w["spec"].get("active") is False
            and w
        ),
        4 * POD_WAIT,
        "Kueue to deactivate the Workload",
    )
    assert (wl["status"].get("requeueState") or {}).get("count", 0) >= 1 or kueue_install.condition(
        wl, "Evicted"
    )["reason"].startswith("Deactivated"), wl["status"]
    wait_for(lambda: job_pods(cluster, namespace, "stuck") == [], POD_WAIT, "the pods gone")
    suspended = job_condition(cluster, namespace, "stuck", "Suspended")
    assert suspended["status"] == "True", suspended
    assert_figures(cluster, cq, admitted=0, pending=0)


def test_a_workload_the_admin_deactivates_stops_the_job_until_reactivated(
    cluster: OperatorCluster, namespace: str, bed: Any, cluster_objects: Callable[..., None]
) -> None:
    cq = f"{namespace}-q"
    cluster_objects(kueue_install.cluster_queue(cq, {"on-demand": QUOTA}))
    create(cluster, kueue_install.local_queue("team", namespace, cq))
    cluster.apply(small("stopped", "team", steps=400), namespace)
    wl = wait_for(lambda: holds(cluster, namespace, "stopped", "PodsReady"), POD_WAIT, "running")
    name = wl["metadata"]["name"]
    # What `kueuectl stop workload` writes.
    stop = json.dumps({"spec": {"active": False}})
    cluster.kubectl("patch", "workloads.kueue.x-k8s.io", name, "-n", namespace, "--type=merge",
                    "-p", stop)  # fmt: skip
    wait_for(lambda: job_pods(cluster, namespace, "stopped") == [], POD_WAIT, "the pods gone")
    assert_figures(cluster, cq, admitted=0, pending=0)
    # The operator leaves the admin's hold alone: still inactive after the job stopped.
    assert workload_of(cluster, namespace, "stopped")["spec"]["active"] is False
    start = json.dumps({"spec": {"active": True}})
    cluster.kubectl("patch", "workloads.kueue.x-k8s.io", name, "-n", namespace, "--type=merge",
                    "-p", start)  # fmt: skip
    wait_ended(cluster, "stopped", namespace)
    assert_figures(cluster, cq, admitted=0, pending=0)


def test_manage_all_under_a_default_local_queue(
    cluster: OperatorCluster, namespace: str, bed: Any, cluster_objects: Callable[..., None]
) -> None:
    """--kueue-manage-all with a LocalQueue `default` (whose pods Kueue's own webhooks would
    otherwise label and gate): the unlabelled job is queued once, through its own Workload."""
    cq = f"{namespace}-q"
    cluster_objects(kueue_install.cluster_queue(cq, {"on-demand": QUOTA}))
    create(cluster, kueue_install.local_queue("default", namespace, cq))
    helm_operator(cluster, "kueue.manageAll=true")
    try:
        cluster.apply(small("plain", None), namespace)
        wait_for(
            lambda: (
                (cluster.get(TFJOBS, "plain", "-n", namespace)["metadata"].get("labels") or {}).get(
                    rules.QUEUE_LABEL
                )
                == "default"
            ),
            POD_WAIT,
            "the job labelled for LocalQueue default",
        )
        wait_ended(cluster, "plain", namespace, timeout=TRAIN_WAIT)
        assert_not_taken_over(cluster, namespace, "plain")
        assert len(workloads(cluster, namespace)) == 1
        assert_figures(cluster, cq, admitted=0, pending=0)
    finally:
        helm_operator(cluster, "kueue.manageAll=false")


def test_fair_sharing_admits_the_lighter_local_queue_first(
    cluster: OperatorCluster, namespace: str, bed: Any, cluster_objects: Callable[..., None]
) -> None:
    """Two LocalQueues share a ClusterQueue with usage-based admission fair sharing: once the
    heavy queue has used the quota, the light queue's job goes first, though created later."""
    cq = f"{namespace}-q"
    scope = {"admissionScope": {"admissionMode": "UsageBasedAdmissionFairSharing"}}
    cluster_objects(
        kueue_install.cluster_queue(cq, {"on-demand": {"cpu": "500m", "memory": "8Gi"}}, **scope)
    )
    create(
        cluster,
        kueue_install.local_queue("heavy", namespace, cq),
        kueue_install.local_queue("light", namespace, cq),
    )
    cluster.apply(small("used", "heavy", cpu="400m", steps=200), namespace)
    wait_for(lambda: holds(cluster, namespace, "used", "PodsReady"), POD_WAIT, "used running")
    cluster.apply(small("heavy-next", "heavy", cpu="400m"), namespace)
    wait_for(lambda: workload_of(cluster, namespace, "heavy-next"), POD_WAIT, "its Workload")
    cluster.apply(small("light-next", "light", cpu="400m"), namespace)
    wait_for(lambda: workload_of(cluster, namespace, "light-next"), POD_WAIT, "its Workload")
    assert_figures(cluster, cq, admitted=1, pending=2)
    wait_ended(cluster, "used", namespace)
    wait_for(lambda: holds(cluster, namespace, "light-next", "QuotaReserved"), POD_WAIT,
             "the light queue's job admitted")  # fmt: skip
    assert holds(cluster, namespace, "heavy-next", "QuotaReserved") is None
    wait_ended(cluster, "light-next", namespace)
    wait_ended(cluster, "heavy-next", namespace)
    assert_figures(cluster, cq, admitted=0, pending=0)
