"""What one TFJob's life costs in API requests, from the API server's audit log (every request
of the operator carries its user agent): the counted writes from create to Succeeded, and none
at all once the job has finished, while the operator goes on with other jobs."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.integration.conftest import CHILD_WAIT, Job
from tests.support.jobs import tfjob
from tests.support.kube import Kubelet, wait_for

pytestmark = pytest.mark.integration

# The operator's API client, and kopf's (watches, Events).
OPERATOR_AGENTS = ("tfjob-operator/", "kopf/")
EVENTS = {"TFJobCreated", "TFJobRunning", "TFJobSucceeded"}
# PS=1, Worker=2, from create to Succeeded and scaled down: both children applied once, both
# StatefulSets scaled to 0 once, one Event per transition. Status patches: Created, Running,
# Succeeded, then the pod counts once the pods are gone (twice if the two StatefulSets' pods go
# more than a moment apart). Before the counting, a job took 9 status patches, 4 Events (its
# TFJobCreated twice) and a list of Events every 10 s while its pods were being made.
CHILD_WRITES = {("patch", "services"): 2, ("patch", "statefulsets"): 4, ("create", "events"): 3}
STATUS_PATCHES = range(4, 6)


def requests(control_plane, namespace: str) -> Counter[tuple[str, str]]:
    """The operator's requests about one namespace so far, by (verb, resource)."""
    counts: Counter[tuple[str, str]] = Counter()
    for e in control_plane.audit():
        ref = e.get("objectRef") or {}
        if (
            e.get("stage") == "ResponseComplete"
            and e.get("userAgent", "").startswith(OPERATOR_AGENTS)
            and ref.get("namespace") == namespace
        ):
            resource = ref.get("resource", "")
            if ref.get("subresource"):
                resource += "/" + ref["subresource"]
            counts[(e["verb"], resource)] += 1
    return counts


def live_and_finish(job: Job, kubelet: Kubelet, body: dict) -> str:
    """A job's whole life as a kubelet would report it: every pod runs, worker 0 exits 0;
    returns once the operator has scaled it down and posted its Events."""
    name = job.create(body)
    kubelet.run_all(job.wait_pods(name, 3))
    job.wait_state(name, "Running")
    kubelet.set(f"{name}-worker-0", state="terminated", exit_code=0)
    job.wait_state(name, "Succeeded")
    wait_for(lambda: job.pods(name) == [], CHILD_WAIT, "pods scaled away")
    wait_for(
        lambda: job.status(name).get("activeReplicas") == "0/3",
        CHILD_WAIT,
        "the pod counts of a scaled-down job",
    )
    wait_for(lambda: {r for _, r, _ in job.events(name)} >= EVENTS, CHILD_WAIT, "Events")
    return name


def test_a_jobs_life_costs_the_counted_writes(job, kubelet, control_plane):
    name = live_and_finish(job, kubelet, tfjob(replicas={"PS": 1, "Worker": 2}))

    def counted() -> Counter[tuple[str, str]] | None:
        got = requests(control_plane, job.ns)
        return got if all(got[k] >= n for k, n in CHILD_WRITES.items()) else None

    got = wait_for(counted, CHILD_WAIT, f"at least the counted writes {CHILD_WRITES}")
    status = got.pop(("patch", "tfjobs/status"), 0)
    assert dict(got) == CHILD_WRITES, "no other request, no repeated write"
    assert status in STATUS_PATCHES, f"{status} status patches"
    assert sorted(r for _, r, _ in job.events(name)) == sorted(EVENTS), "one Event each"


def test_a_finished_job_costs_no_request_while_the_operator_works(
    job, kubelet, control_plane, custom, core, apps, kubectl
):
    live_and_finish(job, kubelet, tfjob(replicas={"PS": 1, "Worker": 2}))
    quiet = requests(control_plane, job.ns)
    # Meanwhile, in another namespace, a job runs until its activeDeadlineSeconds fail it: a
    # timer of the operator's that outlasts its 10 s look at pods that are slow to come.
    other = f"{job.ns}-other"
    kubectl("create", "namespace", other)
    try:
        elsewhere = Job(custom, core, apps, kubectl, other)
        late = elsewhere.create(
            tfjob(name="late", replicas={"Worker": 1}, run_policy={"activeDeadlineSeconds": 12})
        )
        Kubelet(core, other).run_all(elsewhere.wait_pods(late, 1))
        failed = elsewhere.wait_condition(late, "Failed", timeout=CHILD_WAIT)
        assert failed["reason"] == "DeadlineExceeded"
    finally:
        kubectl("delete", "namespace", other, "--wait=false")
    assert requests(control_plane, job.ns) == quiet, "a finished job was touched while idle"
