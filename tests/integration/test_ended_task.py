"""A task that ended stays ended, against the real API server and Kubernetes' own StatefulSet
controller and garbage collector (the kubelet is played): where the server keeps container
restart rules, a pod whose container is down for good (Succeeded) is held by the operator's
finalizer while its job runs, never made again, and let go by the job's end; where it does not
(1.28), nothing of it is written."""

from __future__ import annotations

import kubernetes
import pytest

from tests.integration.user_view import CHILD_WAIT
from tfjob_operator.api.spec import GROUP, PLURAL, VERSION
from tfjob_operator.rules import naming
from tfjob_operator.rules import status as st
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import wait_for

pytestmark = pytest.mark.integration
HELD = naming.finalizer(GROUP)


@pytest.fixture
def rules(api) -> bool:
    """Whether this API server keeps container restart rules (1.35+)."""
    return int(kubernetes.client.VersionApi(api).get_code().minor.rstrip("+")) >= 35


@pytest.mark.smoke
def test_a_done_worker_is_held_while_its_job_runs_and_let_go_by_its_end(
    job, kubelet, core, apps, rules
):
    name = job.create(tfjob(replicas={"Chief": 1, "Worker": 2}, restart_policy="OnFailure"))
    pods = job.wait_pods(name, 3)
    kubelet.run_all(pods)
    job.wait_state(name, "Running")
    template = apps.read_namespaced_stateful_set(f"{name}-worker", job.ns).spec.template
    (container,) = template.spec.containers
    if not rules:
        assert container.restart_policy is None and not template.metadata.finalizers
        return
    assert container.restart_policy == "OnFailure"
    assert template.metadata.finalizers == [HELD]

    worker = f"{name}-worker-1"
    uid = core.read_namespaced_pod(worker, job.ns).metadata.uid
    kubelet.set(worker, phase="Succeeded", state="terminated", exit_code=0)

    def held() -> bool:
        pod = core.read_namespaced_pod(worker, job.ns)
        return pod.metadata.deletion_timestamp is not None and pod.metadata.uid == uid

    # Kubernetes' StatefulSet controller deletes a pod in a terminal phase; ours holds it.
    wait_for(held, CHILD_WAIT, f"{worker} deleted by its StatefulSet, and held")
    kubelet.set(f"{name}-chief-0", phase="Running", state="running")  # a change: a reconcile
    wait_for(
        lambda: job.status(name)["replicaStatuses"]["Worker"]["succeeded"] == 1,
        CHILD_WAIT,
        "worker 1's success counted",
    )
    assert held(), "the pod whose task ended was let go while its job ran"
    assert st.state(job.status(name)) == "Running"

    kubelet.set(f"{name}-chief-0", phase="Succeeded", state="terminated", exit_code=0)
    job.wait_state(name, "Succeeded")
    wait_for(lambda: not job.pods(name), CHILD_WAIT, f"every pod of {name} gone")


def test_a_held_pod_of_a_deleted_job_is_let_go(job, kubelet, core, apps, custom, rules):
    """The job deleted (cleanPodPolicy None: its done pod still held): the garbage collector
    deletes its StatefulSets, and the operator lets the pod go."""
    if not rules:
        pytest.skip("no container restart rules on this server: nothing is held")
    body = tfjob(replicas={"Worker": 2}, run_policy={"cleanPodPolicy": "None"})
    name = job.create(body)
    kubelet.run_all(job.wait_pods(name, 2))
    job.wait_state(name, "Running")
    kubelet.set(f"{name}-worker-0", phase="Succeeded", state="terminated", exit_code=0)
    job.wait_state(name, "Succeeded")
    pod = f"{name}-worker-0"
    wait_for(
        lambda: core.read_namespaced_pod(pod, job.ns).metadata.deletion_timestamp,
        CHILD_WAIT,
        f"{pod} deleted by its StatefulSet",
    )
    assert HELD in core.read_namespaced_pod(pod, job.ns).metadata.finalizers
    custom.delete_namespaced_custom_object(GROUP, VERSION, job.ns, PLURAL, name)
    wait_for(lambda: not job.pods(name), CHILD_WAIT, f"every pod of {name} gone")
