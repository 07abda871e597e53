"""A TFJob deleted and made again under the same name (`kubectl delete -f` then `kubectl apply
-f`) while the first one's children are still going, as a kubelet keeps a pod for its grace
period and the garbage collector takes its time (here finalizers hold a pod and a Service), is
a new job: the old pods' exits are not its own, and an old child in the way is waited for."""

from __future__ import annotations

import contextlib

import kubernetes
import pytest

from tests.integration.user_view import CHILD_WAIT
from tfjob_operator.api.spec import GROUP, PLURAL, VERSION
from tfjob_operator.controller.refusals import EARLIER_OWNER
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import wait_for

pytestmark = pytest.mark.integration

HOLD = {"metadata": {"finalizers": ["test.tfjob.dev/hold"]}}
RELEASE = {"metadata": {"finalizers": None}}
REPLICAS = {"Chief": 1, "Worker": 1}


def owners(objs) -> set[str]:
    return {ref.uid for o in objs for ref in o.metadata.owner_references or []}


@pytest.mark.smoke
def test_a_job_made_again_under_its_name_takes_none_of_the_first_ones_exits(
    job, kubelet, core, apps, operator
):
    name = job.create(tfjob(replicas=REPLICAS))
    kubelet.run_all(job.wait_pods(name, 2))
    job.wait_state(name, "Running")
    chief = f"{name}-chief-0"
    core.patch_namespaced_pod(chief, job.ns, HOLD)
    core.patch_namespaced_service(f"{name}-chief", job.ns, HOLD)
    try:
        kubelet.set(chief, state="terminated", exit_code=0)
        job.wait_state(name, "Succeeded")
        first = job.get(name)["metadata"]["uid"]
        job.custom.delete_namespaced_custom_object(GROUP, VERSION, job.ns, PLURAL, name)
        # As the garbage collector does, without waiting for it to discover the TFJob kind
        # (when it has, it may be first).
        for sts in job.statefulsets(name):
            with contextlib.suppress(kubernetes.client.exceptions.NotFoundException):
                apps.delete_namespaced_stateful_set(sts, job.ns)
        for svc in job.services(name):
            with contextlib.suppress(kubernetes.client.exceptions.NotFoundException):
                core.delete_namespaced_service(svc, job.ns)
        wait_for(
            lambda: job.gone(lambda: job.get(name)) and not job.statefulsets(name),
            CHILD_WAIT,
            "the first job and its StatefulSets gone",
        )
        assert core.read_namespaced_pod(chief, job.ns).metadata.deletion_timestamp

        log_start = operator.log.stat().st_size
        job.create(tfjob(replicas=REPLICAS))
        again = job.get(name)["metadata"]["uid"]
        assert again != first

        def tried() -> bool:
            with operator.log.open() as f:
                f.seek(log_start)
                return EARLIER_OWNER in f.read()

        wait_for(tried, CHILD_WAIT, "the operator to meet the first job's Service")
        assert not job.condition(name, "Failed"), job.status(name)
    finally:
        core.patch_namespaced_service(f"{name}-chief", job.ns, RELEASE)
        core.patch_namespaced_pod(chief, job.ns, RELEASE)

    sets = wait_for(
        lambda: len(s := job.statefulsets(name)) == 2 and s,
        CHILD_WAIT,
        "the second job's StatefulSets",
    )
    assert owners(sets.values()) == {again}
    job.wait_state(name, "Created")
    assert not job.condition(name, "Succeeded"), job.status(name)

    def pods_of_the_second() -> list[str] | bool:
        sel = f"tfjob.dev/job-name={name}"
        pods = core.list_namespaced_pod(job.ns, label_selector=sel).items
        mine = {s.metadata.uid for s in job.statefulsets(name).values()}
        return len(pods) == 2 and owners(pods) <= mine and [p.metadata.name for p in pods]

    kubelet.run_all(wait_for(pods_of_the_second, CHILD_WAIT, "the second job's own 2 pods"))
    job.wait_state(name, "Running")
