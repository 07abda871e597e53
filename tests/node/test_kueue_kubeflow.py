"""Kueue itself with Kubeflow's own group (`kubeflow.org` TFJobs, the chart's second release as in
test_kubeflow_tools.py), both ways a Kubeflow user can be queued:

- through Kueue's built-in `kubeflow.org/tfjob` integration (deprecated, and off by default
  since Kueue v0.19, to be removed): Kueue's webhook suspends the job on create, its job
  controller makes the Workload, unsuspends the job with the flavor's node labels written into
  the templates, and suspends it again to preempt it. The operator only honours
  `runPolicy.suspend` and reports the replicas' state, as training-operator did;
- through the operator's own Workloads (`kueue.enabled` on the kubeflow.org release), as once
  Kueue has dropped that integration, with `TFJob.v1.kubeflow.org` in Kueue's
  `externalFrameworks`.
Nothing here writes a Workload's status."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.node.addons import KUBEFLOW_NAMESPACE, KUBEFLOW_RELEASE, Addons
from tests.node.cluster_reads import FAST, POD_WAIT, TRAIN_WAIT
from tests.node.test_kubeflow_tools import API_VERSION, TFJOBS, TRAINER
from tests.node.test_kueue_itself import create, holds, queue_figures, workloads
from tfjob_operator.rules import kueue as rules
from tfjob_testbed.addons import kueue_install
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.operator_cluster import CHART, OperatorCluster

pytestmark = pytest.mark.node
QUOTA = {"cpu": "1", "memory": "8Gi"}
SPECS = {
    "first": {"nodeLabels": {"kubernetes.io/os": "linux"}},
    "second": {"nodeLabels": {"kubernetes.io/arch": "amd64"}},
}


def job(
    name: str, queue: str, cpu: str = "300m", steps: int = 60, api_version: str = API_VERSION
) -> dict[str, Any]:
    """A Kubeflow TFJob as a Kubeflow user writes it: one worker, the trainer image."""
    container = {
        "name": "tensorflow",
        "image": TRAINER,
        "args": ["--strategy=multi-worker-mirrored", *FAST, f"--steps={steps}"],
        "resources": {"requests": {"cpu": cpu, "memory": "256Mi"}},
    }
    return {
        "apiVersion": api_version,
        "kind": "TFJob",
        "metadata": {"name": name, "labels": {rules.QUEUE_LABEL: queue}},
        "spec": {
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": {"spec": {"containers": [container]}},
                }
            }
        },
    }


def get(cluster: OperatorCluster, name: str, namespace: str) -> dict[str, Any]:
    return cluster.get(TFJOBS, name, "-n", namespace)


def condition(body: dict[str, Any], type_: str) -> str:
    for c in (body.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return str(c["status"])
    return ""


def pods(cluster: OperatorCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    selector = f"training.kubeflow.org/job-name={name}"
    return cluster.get("pods", "-n", namespace, "-l", selector)["items"]


def kubeflow_release(cluster: OperatorCluster, queued: bool) -> None:
    """The kubeflow.org release with `kueue.enabled` as `queued`, upgraded only if it differs."""
    values = json.loads(cluster.helm("get", "values", KUBEFLOW_RELEASE, "--namespace",
                                     KUBEFLOW_NAMESPACE, "-o", "json").stdout) or {}  # fmt: skip
    if bool((values.get("kueue") or {}).get("enabled")) == queued:
        return
    cluster.helm(
        "upgrade", KUBEFLOW_RELEASE, str(CHART), "--namespace", KUBEFLOW_NAMESPACE,
        "--reuse-values", "--set", f"kueue.enabled={str(queued).lower()}", "--wait",
        "--timeout", "5m",
    )  # fmt: skip
    cluster.kubectl("rollout", "status", "deployment", "-n", KUBEFLOW_NAMESPACE, "--timeout=300s")


def kueues_integration() -> dict[str, Any]:
    """Kueue's configuration with its built-in kubeflow.org/tfjob integration turned on."""
    config = kueue_install.configuration()
    return {
        "integrations": {
            "frameworks": [*config["integrations"]["frameworks"], "kubeflow.org/tfjob"],
            # kubeflow.org is Kueue's own here: not an external framework as well.
            "externalFrameworks": [kueue_install.EXTERNAL_FRAMEWORKS[0]],
        }
    }


@pytest.fixture(scope="module")
def flavors(cluster: OperatorCluster, addons: Addons) -> Iterator[None]:
    """The kubeflow.org release and Kueue installed (once per run), and two flavors; the
    release's `kueue.enabled` put back afterwards."""
    addons.kubeflow()
    addons.kueue(kueues_integration())  # the first test's configuration, the second's after it
    create(cluster, *(kueue_install.flavor(n, s) for n, s in SPECS.items()))
    yield
    kubeflow_release(cluster, False)
    for name in SPECS:
        cluster.kubectl("delete", f"resourceflavors.{kueue_install.GROUP}", name, "--wait=false",
                        check=False)  # fmt: skip


def test_kueues_own_kubeflow_integration_queues_admits_preempts_and_finishes(
    cluster: OperatorCluster, addons: Addons, namespace: str, flavors: None
) -> None:
    # The kubeflow.org CRD is there first (the flavors' fixture): Kueue sets an integration up
    # only for a CRD it finds.
    addons.kueue(kueues_integration())
    kubeflow_release(cluster, False)
    cq = f"{namespace}-q"
    pc = f"{namespace}-high"
    create(
        cluster,
        kueue_install.cluster_queue(
            cq, {"first": {"cpu": "500m", "memory": "8Gi"}, "second": QUOTA},
            preemption={"withinClusterQueue": "LowerPriority"},
            # Preempt on the first flavor rather than go on to the next one.
            flavorFungibility={"whenCanPreempt": "MayStopSearch"},
        ),
        kueue_install.priority_class(pc, 1000),
        kueue_install.local_queue("team", namespace, cq),
    )  # fmt: skip
    try:
        low = job("low", "team", steps=3000)
        cluster.apply(low, namespace)
        # Kueue's webhook suspended it on create; its controller admits it on the first flavor
        # and unsuspends it, the flavor's labels written into the template.
        wait_for(lambda: condition(get(cluster, "low", namespace), "Running") == "True",
                 POD_WAIT, "low running")  # fmt: skip
        wl = wait_for(lambda: holds(cluster, namespace, "low", "Admitted"), POD_WAIT, "admitted")
        owner = wl["metadata"]["ownerReferences"][0]
        assert (owner["apiVersion"], owner["name"]) == (API_VERSION, "low")
        assert pods(cluster, namespace, "low")[0]["spec"]["nodeSelector"] == {
            "kubernetes.io/os": "linux"
        }
        # The higher-priority job preempts it: Kueue suspends it, the operator stops its pods,
        # and Kueue admits it again on the second flavor.
        high = job("high", "team", cpu="400m")
        high["metadata"]["labels"][rules.PRIORITY_LABEL] = pc
        cluster.apply(high, namespace)
        wait_for(lambda: condition(get(cluster, "high", namespace), "Succeeded") == "True",
                 TRAIN_WAIT, "high Succeeded")  # fmt: skip

        def moved() -> bool:
            found = pods(cluster, namespace, "low")
            return bool(found) and all(
                p["spec"].get("nodeSelector") == {"kubernetes.io/arch": "amd64"} for p in found
            )

        wait_for(moved, POD_WAIT, "low's pods on the second flavor")
        evicted = [
            e for e in cluster.get("events", "-n", namespace)["items"]
            if e["reason"] == "Preempted" and e["involvedObject"]["name"] == wl["metadata"]["name"]
        ]  # fmt: skip
        assert evicted
        cluster.kubectl("delete", TFJOBS, "low", "-n", namespace)
        wait_for(lambda: queue_figures(cluster, cq) == (0, 0, 0), POD_WAIT, "the queue empty")
    finally:
        cluster.kubectl("delete", f"clusterqueues.{kueue_install.GROUP}", cq, "--wait=false",
                        check=False)  # fmt: skip


def test_without_kueues_integration_the_operators_workloads_queue_kubeflow_jobs(
    cluster: OperatorCluster, addons: Addons, namespace: str, flavors: None
) -> None:
    """Kueue as from v0.19 on (no kubeflow.org/tfjob integration; the operator's group listed in
    externalFrameworks), and the kubeflow.org release with kueue.enabled."""
    addons.kueue({})
    kubeflow_release(cluster, True)
    cq = f"{namespace}-q"
    create(
        cluster,
        kueue_install.cluster_queue(cq, {"first": {"cpu": "0", "memory": "0"}}),
        kueue_install.local_queue("team", namespace, cq),
    )
    try:
        cluster.apply(job("ours", "team"), namespace)
        wl = wait_for(lambda: workloads(cluster, namespace), POD_WAIT, "a Workload")
        assert len(wl) == 1
        owner = wl[0]["metadata"]["ownerReferences"][0]
        assert (owner["apiVersion"], owner["name"]) == (API_VERSION, "ours")
        assert rules.PODSETS_HASH in wl[0]["metadata"]["annotations"], "ours, not Kueue's"
        assert pods(cluster, namespace, "ours") == []
        wait_for(lambda: queue_figures(cluster, cq) == (0, 0, 1), POD_WAIT, "it pending")
        create(cluster, kueue_install.cluster_queue(cq, {"first": QUOTA}))
        wait_for(lambda: condition(get(cluster, "ours", namespace), "Succeeded") == "True",
                 TRAIN_WAIT, "ours Succeeded")  # fmt: skip
        for pod in pods(cluster, namespace, "ours"):
            gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
            assert not gates, gates
        assert len(workloads(cluster, namespace)) == 1
        wait_for(lambda: holds(cluster, namespace, "ours", "Finished"), POD_WAIT, "Finished")
        wait_for(lambda: queue_figures(cluster, cq) == (0, 0, 0), POD_WAIT, "the queue empty")
    finally:
        cluster.kubectl("delete", f"clusterqueues.{kueue_install.GROUP}", cq, "--wait=false",
                        check=False)  # fmt: skip
