"""Kueue's MultiKueue with Kueue v0.19.2 itself, across three clusters: a manager (a control
plane with Kueue and the operators of both groups as processes, no node), the real node's
cluster as the worker with quota (Kueue and the operator from their charts, the chart's
MultiKueue worker identity behind the manager's kubeconfig), and a spare worker that never has
quota for a job (another control plane with Kueue, no node). Kueue's generic adapter dispatches
TFJobs of both groups (`multiKueue.externalFrameworks`, docs/production.md).

Nothing here writes a Workload's status or a TFJob's copy: Kueue does, and the operators."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.node.addons import Addons
from tests.node.cluster_reads import POD_WAIT, TRAIN_WAIT, helm_operator
from tests.node.test_kueue_itself import create
from tests.node.test_kueue_kubeflow import condition, kubeflow_release, kueues_integration
from tests.node.test_kueue_kubeflow import job as queued_job
from tfjob_operator.api.spec import GROUP, KUBEFLOW_GROUP, MULTIKUEUE, PLURAL, VERSION
from tfjob_operator.render.manifests import MULTIKUEUE_WORKER
from tfjob_operator.rules import kueue as rules
from tfjob_operator.rules.kueue import multikueue as mk
from tfjob_testbed.addons import kubeflow_sdk, kueue_install, multikueue_install
from tfjob_testbed.controlplane.plane import ControlPlane
from tfjob_testbed.core.kube import Kubectl, service_account_kubeconfig, wait_for
from tfjob_testbed.core.paths import ROOT
from tfjob_testbed.operator_cluster import NAMESPACE, OperatorCluster
from tfjob_testbed.project.operator import OperatorProcess

pytestmark = pytest.mark.node
QUEUE = "team"
WORKER_QUOTA = {"cpu": "500m", "memory": "8Gi"}  # one job at a time (each asks 300m)
SPARE_QUOTA = {"cpu": "100m", "memory": "8Gi"}  # never one
MANAGER_QUOTA = {"cpu": "2", "memory": "16Gi"}  # several: they wait for a worker, not here
GROUP_FW = kueue_install.EXTERNAL_FRAMEWORKS[0]  # TFJob.v1.tfjob.dev
CRDS = [ROOT / "manifests" / "crd.yaml", ROOT / "manifests" / "kubeflow" / "crd.yaml"]


@dataclass
class Clusters:
    manager: OperatorCluster
    spare: OperatorCluster
    worker: OperatorCluster
    manager_plane: ControlPlane


def _active(c: OperatorCluster, plural: str, name: str) -> bool:
    conditions = (c.get(f"{plural}.{kueue_install.GROUP}", name).get("status") or {}).get(
        "conditions"
    )
    return any(x["type"] == "Active" and x["status"] == "True" for x in conditions or [])


@pytest.fixture(scope="module")
def clusters(cluster: OperatorCluster, addons: Addons, tmp_path_factory) -> Iterator[Clusters]:
    """The three clusters joined: the worker's add-ons (Kueue as from v0.19, Kubeflow's release,
    whose CRD MultiKueue watches there) and the chart's MultiKueue worker identity; the manager
    and the spare made here and stopped afterwards."""
    root: Path = tmp_path_factory.mktemp("multikueue")
    addons.kubeflow()
    addons.kueue({})
    helm_operator(cluster, "kueue.enabled=true", "kueue.multikueue.worker=true")
    create(cluster, kueue_install.flavor("default", {}))
    with contextlib.ExitStack() as stack:
        planes = {}
        for name in ("manager", "spare"):
            plane = ControlPlane(root / name)
            stack.callback(plane.stop)
            planes[name] = plane.start()
        manager, spare = (OperatorCluster.existing(p.kubeconfig) for p in planes.values())
        for c in (manager, spare):
            for crd in CRDS:
                c.kubectl("apply", "--server-side", "-f", str(crd))
        multikueue_install.run_kueue(
            planes["manager"], manager, multikueue_install.manager_configuration()
        )
        multikueue_install.run_kueue(planes["spare"], spare, {})
        for group in (GROUP, KUBEFLOW_GROUP):
            op = OperatorProcess(
                planes["manager"].kubeconfig,
                root / f"operator-{group}.log",
                ["--kueue", f"--api-group={group}"],
            )
            stack.callback(op.stop)
            op.start()
        # The worker as the manager reaches it: the chart's identity for it, a token of it.
        kubectl = Kubectl(cluster.tools.kubectl, cluster.kubeconfig)
        worker_config = service_account_kubeconfig(
            kubectl, cluster.kubeconfig, NAMESPACE, MULTIKUEUE_WORKER, root / "worker.kubeconfig"
        )
        create(
            manager,
            multikueue_install.kubeconfig_secret("worker", worker_config.read_text()),
            multikueue_install.kubeconfig_secret("spare", planes["spare"].kubeconfig.read_text()),
            multikueue_install.worker("worker", "worker"),
            multikueue_install.worker("spare", "spare"),
            multikueue_install.config("workers", ["worker", "spare"]),
            multikueue_install.admission_check("multikueue", "workers"),
            kueue_install.flavor("default", {}),
        )
        create(spare, kueue_install.flavor("default", {}))
        for name in ("worker", "spare"):
            wait_for(lambda n=name: _active(manager, "multikueueclusters", n), POD_WAIT,
                     f"MultiKueueCluster {name} active")  # fmt: skip
        wait_for(lambda: _active(manager, "admissionchecks", "multikueue"), POD_WAIT,
                 "the MultiKueue AdmissionCheck active")  # fmt: skip
        try:
            yield Clusters(manager, spare, cluster, planes["manager"])
        finally:
            helm_operator(cluster, "kueue.multikueue.worker=false", "kueue.enabled=false")
            kubeflow_release(cluster, False)
            cluster.kubectl("delete", f"resourceflavors.{kueue_install.GROUP}", "default",
                            "--wait=false", check=False)  # fmt: skip


@pytest.fixture
def queues(clusters: Clusters, namespace: str) -> Iterator[str]:
    """The test's namespace on all three, with a LocalQueue `team` in each: on the manager its
    ClusterQueue dispatches through MultiKueue; the worker's has room for one job, the
    spare's for none."""
    cq = f"{namespace}-q"
    mk_check = {"admissionChecks": [{"name": "multikueue"}]}
    for c, quota, more in (
        (clusters.manager, MANAGER_QUOTA, {"admissionChecksStrategy": mk_check}),
        (clusters.worker, WORKER_QUOTA, {}),
        (clusters.spare, SPARE_QUOTA, {}),
    ):
        if c is not clusters.worker:
            c.kubectl("create", "namespace", namespace)
        create(
            c,
            kueue_install.cluster_queue(cq, {"default": quota}, **more),
            kueue_install.local_queue(QUEUE, namespace, cq),
        )
    yield namespace
    for c in (clusters.manager, clusters.worker, clusters.spare):
        c.kubectl("delete", PLURAL, "--all", "-n", namespace, "--wait=false", check=False)
        c.kubectl("delete", f"clusterqueues.{kueue_install.GROUP}", cq, "--wait=false", check=False)


def job(name: str, group: str = GROUP, steps: int = 300) -> dict[str, Any]:
    """A TFJob as a user writes it for a queue: one worker, the trainer image; no managedBy."""
    return queued_job(name, QUEUE, steps=steps, api_version=f"{group}/{VERSION}")


def tfjob(c: OperatorCluster, name: str, namespace: str, group: str = GROUP) -> dict[str, Any]:
    """The TFJob ({} while there is none)."""
    return c.get(f"{PLURAL}.{group}", name, "-n", namespace)


def nothing_runs_on(c: OperatorCluster, namespace: str) -> None:
    """A cluster that is no job's worker: no pod, no StatefulSet, no Service of a job."""
    for kind in ("pods", "statefulsets", "services"):
        assert c.get(kind, "-n", namespace)["items"] == [], kind


@pytest.mark.smoke
def test_a_job_applied_on_the_manager_trains_on_the_worker_with_quota_and_reports_back(
    clusters: Clusters, queues: str
) -> None:
    ns = queues
    clusters.manager.apply(job("mnist"), ns)
    # Defaulted as Kueue's webhook defaults its own kinds: the queue leads to MultiKueue.
    wait_for(lambda: tfjob(clusters.manager, "mnist", ns)["spec"].get("managedBy") == MULTIKUEUE,
             POD_WAIT, "spec.managedBy set on the manager")  # fmt: skip
    # The copy on the worker (the spare has no quota for it), with the Workload Kueue made
    # first, taken by the copy.
    copy = wait_for(lambda: tfjob(clusters.worker, "mnist", ns), POD_WAIT, "the worker's copy")
    assert mk.ORIGIN_LABEL in copy["metadata"]["labels"]
    assert "managedBy" not in copy["spec"]
    prebuilt = mk.prebuilt_name(copy["metadata"])
    assert prebuilt is not None

    def owner() -> Any:
        wl = clusters.worker.get(f"workloads.{kueue_install.GROUP}", prebuilt, "-n", ns)
        return (wl["metadata"].get("ownerReferences") or [None])[0]

    taken = wait_for(owner, POD_WAIT, "the prebuilt Workload taken by the copy")
    assert (taken["name"], taken["uid"], taken["controller"]) == (
        "mnist",
        copy["metadata"]["uid"],
        True,
    )
    wls = clusters.worker.get(f"workloads.{kueue_install.GROUP}", "-n", ns)["items"]
    assert [w["metadata"]["name"] for w in wls] == [prebuilt], "the operator made none of its own"
    # Its status, copied back: `kubectl get tfj` on the manager says what the worker's says.
    done = wait_for(lambda: condition(s := tfjob(clusters.manager, "mnist", ns), "Succeeded")
                    == "True" and s, TRAIN_WAIT, "Succeeded on the manager")  # fmt: skip
    status = done["status"]
    assert status["replicaStatuses"]["Worker"]["succeeded"] == 1
    assert status.get("completionTime") and status.get("startTime")
    assert [c["type"] for c in status["conditions"]][:1] == ["Created"]
    printed = clusters.manager.kubectl("get", "tfj", "mnist", "-n", ns).stdout
    assert "Succeeded" in printed, printed
    mgr_wl = clusters.manager.get(f"workloads.{kueue_install.GROUP}", "-n", ns)["items"]
    assert [kueue_install.condition(w, "Finished").get("status") for w in mgr_wl] == ["True"]
    nothing_runs_on(clusters.manager, ns)
    nothing_runs_on(clusters.spare, ns)
    assert tfjob(clusters.spare, "mnist", ns) == {}
    # Kueue removes what it made on the workers once the job is done.
    wait_for(lambda: not tfjob(clusters.worker, "mnist", ns), POD_WAIT, "the worker's copy gone")


SDK_WAIT = """
import json, os, sys

from kubeflow.training import TrainingClient

name, namespace = sys.argv[1:3]
client = TrainingClient(config_file=os.environ["KUBECONFIG"], job_kind="TFJob")
client.wait_for_job_conditions(name, namespace, timeout=int(sys.argv[3]))
job = client.get_job(name, namespace)
print("SDK-RESULT " + json.dumps({
    "conditions": [[c.type, c.status] for c in job.status.conditions],
    "succeeded": client.is_job_succeeded(name, namespace),
    "worker": job.status.replica_statuses["Worker"].succeeded,
}))
"""


def test_kubeflows_group_and_sdk_against_the_manager(clusters: Clusters, queues: str) -> None:
    """A `kubeflow.org` TFJob, queued through the operators' Workloads on both ends, followed
    with Kubeflow's SDK on the manager as a notebook would."""
    ns = queues
    kubeflow_release(clusters.worker, True)  # put back by the module's fixture
    clusters.manager.apply(job("kf", KUBEFLOW_GROUP), ns)
    run = kubeflow_sdk.run_script(
        SDK_WAIT, clusters.manager_plane.kubeconfig, ["kf", ns, str(TRAIN_WAIT)],
        timeout=TRAIN_WAIT + POD_WAIT,
    )  # fmt: skip
    out = run.result
    assert out is not None, run.stdout[-3000:]
    assert out["succeeded"] is True and out["worker"] == 1
    assert ["Succeeded", "True"] in out["conditions"]
    assert tfjob(clusters.manager, "kf", ns, KUBEFLOW_GROUP)["spec"]["managedBy"] == MULTIKUEUE
    nothing_runs_on(clusters.manager, ns)


def test_deleting_the_managers_job_deletes_the_workers(clusters: Clusters, queues: str) -> None:
    ns = queues
    clusters.manager.apply(job("long", steps=100000), ns)
    wait_for(lambda: condition(tfjob(clusters.worker, "long", ns), "Running") == "True",
             POD_WAIT, "running on the worker")  # fmt: skip
    clusters.manager.kubectl("delete", "tfj", "long", "-n", ns)
    wait_for(lambda: not tfjob(clusters.worker, "long", ns), POD_WAIT, "the worker's copy gone")
    wait_for(lambda: not clusters.worker.get("pods", "-n", ns)["items"], POD_WAIT,
             "the worker's pods gone")  # fmt: skip


def test_a_waiting_job_runs_once_a_workers_quota_is_freed(clusters: Clusters, queues: str) -> None:
    """Two jobs, room for one on the worker and none on the spare: the second waits (not on the
    spare), and runs on the worker once the first is done."""
    ns = queues
    clusters.manager.apply(job("first"), ns)
    wait_for(lambda: tfjob(clusters.worker, "first", ns), POD_WAIT, "the first on the worker")
    clusters.manager.apply(job("second"), ns)
    # The second holds quota on the manager, and waits for a worker.
    wait_for(lambda: tfjob(clusters.manager, "second", ns)["spec"].get("managedBy"), POD_WAIT,
             "the second dispatched")  # fmt: skip

    def first_done() -> bool:
        assert not tfjob(clusters.worker, "second", ns), "both on a worker with room for one"
        assert not tfjob(clusters.spare, "second", ns), "dispatched to a worker without quota"
        first = tfjob(clusters.manager, "first", ns)
        assert first, "the first job is gone from the manager"
        return condition(first, "Succeeded") == "True"

    wait_for(first_done, TRAIN_WAIT, "the first Succeeded, the second waiting")
    wait_for(lambda: condition(tfjob(clusters.manager, "second", ns), "Succeeded") == "True",
             TRAIN_WAIT + POD_WAIT, "the second Succeeded")  # fmt: skip
    assert not tfjob(clusters.spare, "second", ns)


def test_kueues_own_kubeflow_integration_dispatches_through_run_policy(
    clusters: Clusters, queues: str, addons: Addons
) -> None:
    """Kueue's built-in `kubeflow.org/tfjob` integration on both ends (deprecated, off by
    default since v0.19), as a Kubeflow user may still run it: Kueue's webhook on the manager
    writes `runPolicy.managedBy`, its own adapter dispatches the job, and on the worker its own
    controller admits the copy; the operators only leave the manager's job alone and run the
    worker's as training-operator did. Runs last: it reconfigures Kueue on both ends."""
    ns = queues
    addons.kueue(kueues_integration())
    kubeflow_release(clusters.worker, False)
    built_in = {
        "integrations": {"frameworks": ["kubeflow.org/tfjob"], "externalFrameworks": [GROUP_FW]},
        "multiKueue": {"externalFrameworks": [{"name": GROUP_FW}]},
    }
    multikueue_install.restart_kueue(clusters.manager_plane, built_in)
    wait_for(lambda: _active(clusters.manager, "multikueueclusters", "worker"), POD_WAIT,
             "the worker connected again")  # fmt: skip
    clusters.manager.apply(job("builtin", KUBEFLOW_GROUP), ns)
    made = tfjob(clusters.manager, "builtin", ns, KUBEFLOW_GROUP)
    assert made["spec"]["runPolicy"]["managedBy"] == MULTIKUEUE, "Kueue's webhook wrote it"
    assert "managedBy" not in made["spec"]
    done = wait_for(
        lambda: condition(s := tfjob(clusters.manager, "builtin", ns, KUBEFLOW_GROUP),
                          "Succeeded") == "True" and s,
        TRAIN_WAIT, "Succeeded on the manager",
    )  # fmt: skip
    assert done["status"]["replicaStatuses"]["Worker"]["succeeded"] == 1
    # Kueue's own Workload on the manager (owned by the job), none of the operator's
    (wl,) = clusters.manager.get(f"workloads.{kueue_install.GROUP}", "-n", ns)["items"]
    assert not wl["metadata"].get("annotations", {}).get(rules.PODSETS_HASH)
    reasons = [
        e["reason"] for e in clusters.manager.get("events", "-n", ns)["items"]
        if e["involvedObject"]["name"] == "builtin"
    ]  # fmt: skip
    assert "ManagedElsewhere" in reasons
    nothing_runs_on(clusters.manager, ns)
