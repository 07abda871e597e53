"""What one TFJob's life costs in API requests, from the API server's audit log (every request
of the operator carries its user agent): the counted writes from create to Succeeded, none at
all once the job has finished, while the operator goes on with other jobs, and watches that let
the API server filter out every object that is not ours."""

from __future__ import annotations

import re
import urllib.parse
from collections import Counter

import pytest

from tests.integration.user_view import CHILD_WAIT, Job
from tfjob_operator.rules.gang import NATIVE_API
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import Kubelet, wait_for
from tfjob_testbed.project.operator import stepped_aside

pytestmark = pytest.mark.integration

# The operator's API client and kopf's (watches, Events) send one user agent.
OPERATOR_AGENTS = ("tfjob-operator/",)
OURS_SELECTOR = "app.kubernetes.io/managed-by=tfjob-operator"
FOREIGN = "training.kubeflow.org/job-name="
FIRST_PASS = re.compile(r"first pass: all (\d+) TFJobs known at the start looked at")
CHILDREN = {"pods", "statefulsets", "services", "persistentvolumeclaims", "deployments"}
EVENTS = {"TFJobCreated", "TFJobRunning", "TFJobSucceeded"}
# PS=1, Worker=2, from create to Succeeded and scaled down: both children created once (a new
# job's children are created, not applied), both StatefulSets scaled to 0 once, worker 0 (its
# task done) deleted once with a short grace period, one Event per transition. Status patches:
# Created, Running,
# Succeeded, then the pod counts once the pods are gone (twice if the two StatefulSets' pods go
# more than a moment apart). Before the counting, a job took 9 status patches, 4 Events (its
# TFJobCreated twice) and a list of Events every 10 s while its pods were being made.
# No pod is patched: the per-pod Kubeflow labels (replica index, master role), one patch per
# PS or Worker pod, are for jobs of Kubeflow's own group (tests/integration/test_kubeflow_group.py).
CHILD_WRITES = {
    ("create", "services"): 2,
    ("create", "statefulsets"): 2,
    ("patch", "statefulsets"): 2,
    ("delete", "pods"): 1,
    ("create", "events"): 3,
}
STATUS_PATCHES = range(4, 6)
# Where the API server serves Kubernetes' own gangs (1.37 here): the job's Workload and
# PodGroup, one apply each.
GANG_WRITES = {("patch", "workloads"): 1, ("patch", "podgroups"): 1}


# Where it keeps container restart rules (1.35+): no pod is deleted to end a done task (its
# container stays down), and each pod the scale-down deletes is let go of the operator's
# finalizer, one patch each.
RULE_WRITES = {("patch", "pods"): 3}


def child_writes(kube) -> dict[tuple[str, str], int]:
    writes = CHILD_WRITES | (GANG_WRITES if kube.serves(*NATIVE_API) else {})
    if kube.keeps_restart_rules("default"):
        writes = {k: n for k, n in writes.items() if k != ("delete", "pods")} | RULE_WRITES
    return writes


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


def test_a_jobs_life_costs_the_counted_writes(job, kubelet, control_plane, kube):
    name = live_and_finish(job, kubelet, tfjob(replicas={"PS": 1, "Worker": 2}))
    want = child_writes(kube)

    def counted() -> Counter[tuple[str, str]] | None:
        got = requests(control_plane, job.ns)
        return got if all(got[k] >= n for k, n in want.items()) else None

    try:
        got = wait_for(counted, CHILD_WAIT, f"at least the counted writes {want}")
    except AssertionError:
        raise AssertionError(f"got {requests(control_plane, job.ns)}") from None
    status = got.pop(("patch", "tfjobs/status"), 0)
    assert dict(got) == want, "no other request, no repeated write"
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


def operator_reads(control_plane) -> list[tuple[str, str, dict[str, list[str]], str]]:
    """Every client's lists and watches so far: (verb, resource, query, user agent)."""
    reads = []
    for e in control_plane.audit():
        ref = e.get("objectRef") or {}
        if e.get("verb") in ("list", "watch") and ref.get("resource"):
            query = urllib.parse.parse_qs(urllib.parse.urlsplit(e["requestURI"]).query)
            reads.append((e["verb"], ref["resource"], query, e.get("userAgent", "")))
    return reads


@pytest.mark.smoke
def test_every_watch_of_children_lets_the_api_server_filter(
    job, kubelet, control_plane, operator, tmp_path
):
    """Another tenant's pods never cross the wire: every list and watch of a kind the operator
    owns carries its label selector, TFJobs are the only unfiltered watch, initial lists come
    in pages, and every request of the operator, kopf's too, says who sent it.

    (The API server logs a watch once it ends: the operator runs a job and stops.)"""
    with stepped_aside(operator, control_plane.kubeconfig, tmp_path / "operator.log"):
        live_and_finish(job, kubelet, tfjob(replicas={"PS": 1, "Worker": 2}))
    reads = operator_reads(control_plane)
    ours = [(v, r, q) for v, r, q, agent in reads if agent.startswith(OPERATOR_AGENTS)]
    watched = {r for v, r, _ in ours if v == "watch"}
    assert watched >= CHILDREN | {"tfjobs"}, watched
    assert not [a for *_, a in reads if a.startswith("kopf/")], "kopf's requests say they are ours"
    for verb, resource, query in ours:
        if verb == "list" and query.get("labelSelector", [""])[0].startswith(FOREIGN):
            # One job's look for another controller's pods and Services (a job whose status
            # someone else wrote): filtered by the job's name on the server, a handful of items.
            assert resource in ("pods", "services"), (verb, resource, query)
            continue
        if resource in CHILDREN:
            assert query.get("labelSelector") == [OURS_SELECTOR], (verb, resource, query)
        elif resource == "tfjobs":
            assert "labelSelector" not in query, (verb, resource, query)
        if verb == "list" and resource in CHILDREN | {"tfjobs"}:
            assert query.get("limit") == ["500"], (verb, resource, query)


def operator_writes(control_plane, namespace: str) -> list[tuple[str, str, str]]:
    """The operator's writes in one namespace so far: (verb, resource, object name)."""
    return [
        (e["verb"], what, (e.get("objectRef") or {}).get("name", ""))
        for e in control_plane.audit()
        if e.get("stage") == "ResponseComplete"
        and e.get("userAgent", "").startswith(OPERATOR_AGENTS)
        and (e.get("objectRef") or {}).get("namespace") == namespace
        and e["verb"] in ("create", "update", "patch", "delete")
        for what in [(e.get("objectRef") or {}).get("resource", "")]
    ]


def test_a_restart_writes_nothing_for_finished_jobs_and_makes_no_child_twice(
    job, kubelet, control_plane, operator
):
    finished = [
        live_and_finish(job, kubelet, tfjob(name=f"done-{i}", replicas={"PS": 1, "Worker": 2}))
        for i in range(2)
    ]
    running = job.create(tfjob(name="busy", replicas={"Worker": 2}))
    kubelet.run_all(job.wait_pods(running, 2))
    job.wait_state(running, "Running")
    children = {name: (job.statefulsets(name), job.services(name)) for name in [*finished, running]}
    events = {name: sorted(job.events(name)) for name in finished}
    before = len(operator_writes(control_plane, job.ns))

    operator.kill()  # a crash: nothing kept in memory
    operator.start()

    def first_pass() -> str | None:
        # The operator watches every namespace: jobs of earlier tests whose namespaces are still
        # being deleted are known to it too, so the count is ours (3) or more.
        text = operator.log.read_text().rsplit("===== start #", 1)[1]
        found = FIRST_PASS.search(text)
        return found is not None and int(found.group(1)) >= 3 and text

    wait_for(first_pass, CHILD_WAIT, "the first pass over the known jobs reported")
    # A change after the restart is still acted on: the running job succeeds.
    kubelet.set(f"{running}-worker-0", state="terminated", exit_code=0)
    job.wait_state(running, "Succeeded")

    after = operator_writes(control_plane, job.ns)[before:]
    touched = [w for w in after if any(w[2].startswith(f"{name}") for name in finished)]
    assert touched == [], touched
    assert not [w for w in after if w[0] == "create" and w[1] != "events"], after
    for name in finished:
        assert sorted(job.events(name)) == events[name], "no Event posted again"
    for name, (sets, services) in children.items():
        assert set(job.statefulsets(name)) == set(sets) and set(job.services(name)) == set(services)
        uids = {s.metadata.uid for s in job.statefulsets(name).values()}
        assert uids == {s.metadata.uid for s in sets.values()}, "the same children, not new ones"
