"""Kueue's cycle with a training job on the real node: queued with no pod, admitted on one
flavor, preempted mid-training (its pods really stop, the quota is given back), admitted again
on another flavor, resumed from its checkpoint, Finished. The chart runs with
`kueue.enabled=true`; the test plays Kueue's scheduler, writing the Workload's status through
kubectl as Kueue would. Prints one `CHAOS` line for docs/development.md's table."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.node.helpers import (
    CHECKPOINT_EVERY,
    POD_WAIT,
    RESTORED,
    SAVED,
    STEP,
    assert_scaled_down,
    established,
    fast_job,
    follow,
    newest_step,
    wait_ended,
    wait_halfway_past_a_checkpoint,
)
from tfjob_operator.rules import kueue
from tfjob_testbed import kueue as kq
from tfjob_testbed.cluster import CHART, NAMESPACE, RELEASE, Cluster
from tfjob_testbed.kube import wait_for

pytestmark = pytest.mark.node
STEPS = 600
TOLERATION = {"key": "tfjob.dev/kueue-test", "operator": "Exists", "effect": "NoSchedule"}


def _helm_kueue(cluster: Cluster, enabled: bool) -> None:
    """The release as it is, with Kueue turned on or off; returns once the new operator pods
    have replaced the old ones."""
    cluster.helm(
        "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
        "--set", f"kueue.enabled={str(enabled).lower()}", "--wait", "--timeout", "5m",
    )  # fmt: skip
    cluster.kubectl("rollout", "status", "deployment", "--namespace", NAMESPACE, "--timeout=300s")


@pytest.fixture(scope="module")
def flavors(cluster: Cluster) -> Iterator[dict[str, dict[str, Any]]]:
    """Kueue's CRDs, two ResourceFlavors (any Linux node; this very node, with a toleration),
    and the operator with `kueue.enabled`; all undone afterwards."""
    node = cluster.get("nodes")["items"][0]["metadata"]["labels"]["kubernetes.io/hostname"]
    specs = {
        "any-linux": {"nodeLabels": {"kubernetes.io/os": "linux"}},
        "this-node": {"nodeLabels": {"kubernetes.io/hostname": node}, "tolerations": [TOLERATION]},
    }
    made = cluster.kubectl(
        "create", "--validate=false", "-f", "-", input=kq.crd_documents(), check=False
    )
    assert made.returncode == 0 or "AlreadyExists" in made.stderr, made.stderr
    try:
        wait_for(lambda: all(established(cluster, c) for c in kq.CRD_NAMES), 60, "CRDs")
        for name, spec in specs.items():
            cluster.kubectl("apply", "-f", "-", input=json.dumps(kq.flavor(name, spec)))
        _helm_kueue(cluster, True)
        yield specs
    finally:
        _helm_kueue(cluster, False)
        cluster.kubectl("delete", "crd", *kq.CRD_NAMES, "--timeout=120s", check=False)


def workload(cluster: Cluster, namespace: str) -> dict[str, Any]:
    items = cluster.get("workloads.kueue.x-k8s.io", "-n", namespace).get("items") or []
    assert len(items) <= 1, [w["metadata"]["name"] for w in items]
    return items[0] if items else {}


def kueue_writes(cluster: Cluster, namespace: str, status: dict[str, Any]) -> None:
    """Kueue's write of the Workload's status, through kubectl."""
    current = workload(cluster, namespace)
    cluster.kubectl(
        "patch", "workloads.kueue.x-k8s.io", current["metadata"]["name"], "-n", namespace,
        "--subresource=status", "--type=merge", "-p", json.dumps(kq.status_write(current, status)),
    )  # fmt: skip


def job_pods(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    return cluster.get("pods", "-n", namespace, "-l", "tfjob.dev/job-name=queued")["items"]


def test_preempted_mid_training_resumes_on_another_flavor(
    cluster: Cluster, namespace: str, flavors: dict[str, dict[str, Any]]
) -> None:
    job = fast_job("queued", "mnist-ps", f"--steps={STEPS}")
    job["metadata"]["labels"] = {kueue.QUEUE_LABEL: "team-a"}
    cluster.apply(job, namespace)

    # Queued: a Workload, and no pod.
    wl = wait_for(lambda: workload(cluster, namespace), POD_WAIT, "the Workload")
    assert {p["name"]: p["count"] for p in wl["spec"]["podSets"]} == {
        "chief": 1,
        "ps": 1,
        "worker": 2,
    }
    wait_for(
        lambda: (
            (cluster.tfjob_status("queued", namespace).get("waiting") or {})
            .get("queued-chief-0", "")
            .startswith("Queued:")
        ),
        POD_WAIT,
        "the job to say it is queued",
    )
    assert job_pods(cluster, namespace) == []

    # Admitted on any-linux: it trains.
    kueue_writes(cluster, namespace, kq.admission(wl, "any-linux"))
    first = follow(cluster, "queued-chief-0", namespace)
    wait_for(
        lambda: kq.condition(workload(cluster, namespace), "PodsReady").get("status") == "True",
        POD_WAIT,
        "PodsReady",
    )
    wait_halfway_past_a_checkpoint(first)

    # Preempted: the pods stop, then the quota is given back.
    kueue_writes(cluster, namespace, kq.PREEMPTION)
    before = first.wait(POD_WAIT)
    reached = newest_step(before)
    saved = max(int(m.group(2)) for m in SAVED.finditer(before))
    assert_scaled_down(cluster, "queued", namespace)
    wait_for(lambda: job_pods(cluster, namespace) == [], POD_WAIT, "the pods gone")
    given_back = wait_for(
        lambda: (
            (w := workload(cluster, namespace)).get("status", {}).get("admission") is None
            and kq.condition(w, "QuotaReserved").get("status") == "False"
            and w
        ),
        POD_WAIT,
        "the reservation given back",
    )
    assert kq.condition(given_back, "Requeued")["status"] == "True"
    suspended = next(
        c
        for c in cluster.tfjob_status("queued", namespace)["conditions"]
        if c["type"] == "Suspended"
    )
    assert (suspended["status"], suspended["reason"]) == ("True", "Evicted")

    # Admitted again, on this-node: the pods come back there, and resume from the checkpoint.
    kueue_writes(cluster, namespace, kq.admission(given_back, "this-node"))
    second = follow(cluster, "queued-chief-0", namespace)
    placed = cluster.get("pod", "queued-worker-0", "-n", namespace)["spec"]
    assert placed["nodeSelector"] == flavors["this-node"]["nodeLabels"]
    assert TOLERATION in placed["tolerations"]
    status = wait_ended(cluster, "queued", namespace, log=second)
    log = second.wait()
    restored = RESTORED.search(log)
    assert restored, log[-3000:]
    at = int(restored.group(2))
    assert at >= saved, (saved, restored.group(0))
    steps = [int(s) for s in STEP.findall(log)]
    assert steps and steps[0] > at and steps[-1] == STEPS, log[-3000:]
    lost = max(0, reached - at)
    assert lost <= CHECKPOINT_EVERY, (reached, at)
    assert status["restarts"] == 0 and not status.get("failure"), status

    # Finished: the quota frees at once.
    finished = wait_for(
        lambda: (
            kq.condition(workload(cluster, namespace), "Finished").get("status") == "True"
            and workload(cluster, namespace)
        ),
        POD_WAIT,
        "the Workload Finished",
    )
    assert kq.condition(finished, "Finished")["reason"] == "Succeeded"
    fault = "Kueue preemption, re-admitted on another flavor"
    print(f"\nCHAOS fault={fault!r} steps_lost={lost} restarts={status['restarts']}")
