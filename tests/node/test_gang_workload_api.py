"""Gang scheduling on the real node, by Kubernetes' own Workload API (1.37; the bed turns
`GenericWorkload` on): the chart's operator, left at `gangScheduling.provider=auto`, makes
every TFJob a gang, and the real kube-scheduler's GangScheduling plugin places each one whole
or not at all. GPUs are the node's advertised `nvidia.com/gpu` (2): each test's jobs ask for
more than that at once, so only the gang decides who gets them.

The contrast is shown, not told: the same shortage with the operator's gangs turned off
(`provider=none`) leaves jobs holding GPUs they cannot train with.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from tests.node.cluster_reads import (
    POD_WAIT,
    fast_job,
    helm_operator,
    is_true,
    job_pods,
    wait_ended,
)
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.nodes.nodeconfig import GPUS
from tfjob_testbed.operator_cluster import OperatorCluster

pytestmark = pytest.mark.node
GPU = "nvidia.com/gpu"
LEAD = "tfjob-gang-lead"  # a priority class the gangs-off contrast gives its chiefs


def gpu_job(name: str, chief_class: str = "") -> dict[str, Any]:
    """A Chief and a Worker training together (MultiWorkerMirrored), one GPU each: 2 of the
    node's GPUS, a gang of 2."""
    body = fast_job(name, "mnist-sync", "--steps=40")
    specs = body["spec"]["tfReplicaSpecs"]
    specs["Worker"]["replicas"] = 1
    specs["Chief"] = copy.deepcopy(specs["Worker"])
    for rs in specs.values():
        (c,) = rs["template"]["spec"]["containers"]
        c["resources"] = {"limits": {GPU: 1}}
    if chief_class:
        specs["Chief"]["template"]["spec"]["priorityClassName"] = chief_class
    return body


def live_pods(cluster: OperatorCluster, namespace: str, job: str) -> list[dict[str, Any]]:
    """The job's pods but those being deleted."""
    pods = job_pods(cluster, namespace, job)
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def bound(cluster: OperatorCluster, namespace: str, job: str) -> int:
    """How many of the job's pods the scheduler has bound to a node."""
    return sum(1 for p in live_pods(cluster, namespace, job) if p["spec"].get("nodeName"))


def blocker(cluster: OperatorCluster, namespace: str, gpus: int) -> str:
    """A pod that holds `gpus` of the node's GPUs until deleted; its name, once bound."""
    name = "gpu-holder"
    cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "hold",
                        "image": "tfjob-operator/trainer:0.1.0",
                        "command": ["sleep", "3600"],
                        "resources": {"limits": {GPU: gpus}},
                    }
                ],
            },
        },
        namespace,
    )
    wait_for(
        lambda: cluster.get("pod", name, "-n", namespace)["spec"].get("nodeName"),
        POD_WAIT,
        "the GPU holder bound",
    )
    return name


@pytest.fixture
def gangs_off(cluster: OperatorCluster) -> Iterator[None]:
    """The operator with `gangScheduling.provider=none` for one test, then as it was."""
    helm_operator(cluster, "gangScheduling.provider=none")
    try:
        yield
    finally:
        helm_operator(cluster, "gangScheduling.provider=auto")


def test_every_job_is_a_gang_of_its_own(cluster: OperatorCluster, namespace: str) -> None:
    """auto found Kubernetes' own gang API: a Workload and a PodGroup per job, owned by it,
    every pod in the group."""
    cluster.apply(gpu_job("gang-made"), namespace)
    group = wait_for(
        lambda: cluster.get("podgroups.scheduling.k8s.io", "gang-made", "-n", namespace),
        POD_WAIT,
        "the job's PodGroup",
    )
    assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    workload = cluster.get("workloads.scheduling.k8s.io", "gang-made", "-n", namespace)
    assert workload["spec"]["controllerRef"]["name"] == "gang-made"
    for obj in (group, workload):
        (owner,) = obj["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("TFJob", "gang-made")
    wait_for(lambda: len(live_pods(cluster, namespace, "gang-made")) == 2, POD_WAIT, "2 pods")
    for p in live_pods(cluster, namespace, "gang-made"):
        # Not dropped by the API server: its gate is on.
        assert p["spec"]["schedulingGroup"] == {"podGroupName": "gang-made"}
    wait_ended(cluster, "gang-made", namespace)


@pytest.mark.smoke
def test_a_job_that_cannot_fit_whole_binds_no_pod_says_so_and_runs_once_it_can(
    cluster: OperatorCluster, namespace: str
) -> None:
    """One GPU held elsewhere: the job's 2 GPU pods would fit one at a time. The gang binds
    neither (0 of 2: no GPU held for nothing), the job says why, and it runs to Succeeded as
    soon as the GPU is given back."""
    holder = blocker(cluster, namespace, GPUS - 1)
    cluster.apply(gpu_job("gang-waits"), namespace)
    waiting = wait_for(
        lambda: cluster.tfjob_status("gang-waits", namespace).get("waiting") or None,
        POD_WAIT,
        "the job to say its pods wait",
    )
    assert bound(cluster, namespace, "gang-waits") == 0, live_pods(cluster, namespace, "gang-waits")
    assert all(why.startswith("Unschedulable: ") for why in waiting.values()), waiting
    events = cluster.get("events", "-n", namespace, "--field-selector",
                         "involvedObject.name=gang-waits")  # fmt: skip
    assert any(e.get("reason") == "PodWaiting" for e in events.get("items") or []), events
    assert bound(cluster, namespace, "gang-waits") == 0
    cluster.kubectl("delete", "pod", holder, "-n", namespace, "--wait=false")
    status = wait_ended(cluster, "gang-waits", namespace)
    assert not status.get("waiting") and is_true(status, "Succeeded"), status


@pytest.fixture
def lead_class(cluster: OperatorCluster) -> Iterator[str]:
    """A priority class above the default, for the contrast's chiefs."""
    cluster.apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": LEAD},
            "value": 1000,
            "preemptionPolicy": "Never",
        },
        "default",  # cluster-scoped: kubectl leaves it out
    )
    yield LEAD
    cluster.kubectl("delete", "priorityclass", LEAD, "--ignore-not-found")


def apply_at_once(cluster: OperatorCluster, namespace: str, jobs: list[dict[str, Any]]) -> None:
    """Every job's pods made while the node takes none (cordoned), then the node opened: the
    scheduler finds them all pending together, as on a full cluster."""
    node = cluster.get("nodes")["items"][0]["metadata"]["name"]
    cluster.kubectl("cordon", node)
    try:
        for job in jobs:
            cluster.apply(job, namespace)
        for job in jobs:
            name = job["metadata"]["name"]
            wait_for(lambda n=name: len(live_pods(cluster, namespace, n)) == 2, POD_WAIT,
                     f"{name}'s pods made")  # fmt: skip
    finally:
        cluster.kubectl("uncordon", node)


def test_two_jobs_that_fit_one_at_a_time_run_one_after_the_other(
    cluster: OperatorCluster, namespace: str
) -> None:
    """Two jobs of 2 GPUs on a node of 2, pending together: one gang takes both GPUs and runs
    to Succeeded while the other binds nothing; then the other runs."""
    jobs = [gpu_job("pair-a"), gpu_job("pair-b")]
    apply_at_once(cluster, namespace, jobs)
    seen: set[tuple[int, int]] = set()

    def one_done() -> str | None:
        counts = (bound(cluster, namespace, "pair-a"), bound(cluster, namespace, "pair-b"))
        seen.add(counts)
        for name in ("pair-a", "pair-b"):
            if is_true(cluster.tfjob_status(name, namespace), "Succeeded"):
                return name
        return None

    first = wait_for(one_done, POD_WAIT * 3, "one of the pair Succeeded", interval=1)
    # Never a pod of each bound at once: while one job holds GPUs the other holds none. (A
    # job's own count passes through 1 for a moment as its two bindings land, and as its pods
    # go once it has succeeded.)
    assert not [pair for pair in seen if all(pair)], seen
    assert (2, 0) in seen or (0, 2) in seen, seen
    second = "pair-b" if first == "pair-a" else "pair-a"
    wait_ended(cluster, second, namespace)


def test_without_gangs_the_same_pair_holds_a_gpu_each_and_neither_trains(
    cluster: OperatorCluster, namespace: str, gangs_off: None, lead_class: str
) -> None:
    """The same two jobs with the operator's gangs off: each job's chief takes a GPU (the
    chiefs go first, by their priority), each worker waits for a GPU the other job holds, and
    neither job can train. This is the partial allocation a gang prevents."""
    jobs = [gpu_job("half-a", lead_class), gpu_job("half-b", lead_class)]
    apply_at_once(cluster, namespace, jobs)

    def waits_for_a_gpu(job: str) -> bool:
        waiting = cluster.tfjob_status(job, namespace).get("waiting") or {}
        return any(w.startswith("Unschedulable: ") and GPU in w for w in waiting.values())

    def half_bound() -> bool:
        names = [j["metadata"]["name"] for j in jobs]
        return all(bound(cluster, namespace, n) == 1 and waits_for_a_gpu(n) for n in names)

    wait_for(half_bound, POD_WAIT, "each job holding one GPU, its worker waiting for another")
    for j in jobs:
        assert (
            "schedulingGroup" not in live_pods(cluster, namespace, j["metadata"]["name"])[0]["spec"]
        )
        assert not cluster.get("podgroups.scheduling.k8s.io", "-n", namespace)["items"]
