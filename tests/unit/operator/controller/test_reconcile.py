"""The reconciler on a fake client: what it remembers of each job between reconciles (the
status write cache, the fold of count-only writes, the FailedCreate checks), what it shares
across the jobs of a namespace, and that it forgets a job whole; and which API errors only a
spec change can heal (the job fails as InvalidSpec) and which are retried (and become a
ReconcileError condition if they last).

kopf's indexes are plain dicts here, the API server a `FakeKube` that keeps the TFJobs and
records every call (fakes.py), and time is the reconciler's injected clock: no sleeps.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import threading
from typing import Any

import pytest

from tests.unit.operator.controller.fakes import api_error
from tfjob_operator.controller import apply as apply_module
from tfjob_operator.controller.apply import COUNTS_DELAY_SECONDS
from tfjob_operator.controller.failedcreates import (
    CREATE_CHECK_SECONDS,
    CREATE_GRACE_SECONDS,
    FAILED_CREATE_SHARED_SECONDS,
)
from tfjob_operator.controller.jobstate import JobState
from tfjob_operator.controller.projections import job_record
from tfjob_operator.controller.reconcile import PERSISTENT_ATTEMPTS, PERSISTENT_SECONDS
from tfjob_operator.controller.refusals import is_terminal
from tfjob_operator.controller.workqueue import RetryableError
from tfjob_operator.rules import naming
from tfjob_operator.rules import status as st
from tfjob_operator.rules.kueue.admission import observe_workload
from tfjob_operator.rules.kueue.queue import QueueView
from tfjob_operator.rules.pods import observe
from tfjob_operator.rules.statefulsets import StatefulSetObservation
from tfjob_protocol import stop
from tfjob_testbed.core.jobs import pod


def test_an_index_behind_our_own_status_write_is_not_taken_for_a_new_state(cluster):
    key = cluster.create("mnist", replicas={"Worker": 2})
    cluster.reconcile(key, deliver=False)
    assert len(cluster.writes(key)) == 1
    assert cluster.reasons() == [st.Reason.CREATED]
    first = copy.deepcopy(cluster.kube.stored[key])
    first_rv = first["metadata"]["resourceVersion"]
    assert cluster.reconciler.wrote(key, first_rv)
    assert not cluster.reconciler.wrote(key, "2"), "the version before our write is not ours"

    # The index still shows the job without a status: nothing new to say.
    cluster.reconcile(key, deliver=False)
    assert len(cluster.writes(key)) == 1, "the stale index was taken for the job's status"
    assert cluster.reasons() == [st.Reason.CREATED]

    # A second write on top of the first, while the index still shows neither.
    cluster.running(key, 0, 1)
    cluster.reconcile(key, deliver=False)
    assert len(cluster.writes(key)) == 2
    assert cluster.reasons() == [st.Reason.CREATED, st.Reason.RUNNING]
    assert cluster.writes(key)[1].keys() >= {"conditions"}, "the patch is against our write"
    assert "startTime" not in cluster.writes(key)[1], "startTime was written by the first write"
    cluster.reconcile(key, deliver=False)
    assert len(cluster.writes(key)) == 2, "the object before both writes was taken as news"

    # The watch now brings our first write: older than the second, so still not news.
    cluster.jobs[key] = [job_record(first)]
    cluster.reconcile(key, deliver=False)
    assert len(cluster.writes(key)) == 2
    assert cluster.reasons() == [st.Reason.CREATED, st.Reason.RUNNING]

    # Another writer empties the status: a newer object than ours, which is taken as it is.
    cluster.kube.stored[key]["status"] = {}
    cluster.kube.stored[key]["metadata"]["resourceVersion"] = cluster.kube.next_rv()
    cluster.deliver(key)
    cluster.reconcile(key)
    assert len(cluster.writes(key)) == 3
    assert st.is_true(cluster.status(key), st.Cond.RUNNING)


def test_our_write_once_the_watch_brings_it_back_is_kept_once_in_the_index(cluster):
    key = cluster.create("mnist", replicas={"Worker": 2})
    cluster.reconcile(key, deliver=False)
    written_rv = cluster.kube.stored[key]["metadata"]["resourceVersion"]
    assert not cluster.reconciler.caught_up(key, "0"), "an older version is not our write"
    assert cluster.reconciler.state[key].written is not None, "kept while the index is behind"
    cluster.deliver(key)
    assert cluster.reconciler.caught_up(key, written_rv)
    assert cluster.reconciler.state[key].written is None
    assert not cluster.reconciler.wrote(key, written_rv)
    cluster.reconcile(key, deliver=False)
    assert len(cluster.writes(key)) == 1, "the index's object is our write: nothing new to say"


def test_pod_counts_alone_wait_and_fold_into_one_write_a_transition_goes_at_once(cluster):
    key = cluster.create("mnist", replicas={"Worker": 3})
    cluster.reconcile(key)
    assert len(cluster.writes(key)) == 1

    cluster.running(key, 0)
    assert cluster.reconcile(key) == pytest.approx(COUNTS_DELAY_SECONDS)
    cluster.now += 0.4
    cluster.running(key, 0, 1)
    assert cluster.reconcile(key) == pytest.approx(COUNTS_DELAY_SECONDS - 0.4), "the due stays"
    assert len(cluster.writes(key)) == 1, "pod counts alone were written at once"

    cluster.now += COUNTS_DELAY_SECONDS - 0.4
    assert cluster.reconcile(key) is None
    assert len(cluster.writes(key)) == 2
    folded = cluster.writes(key)[-1]
    assert set(folded) <= st.COUNTS
    assert folded["activeReplicas"] == "2/3", "both pods in one write"
    assert cluster.reconcile(key) is None
    assert len(cluster.writes(key)) == 2

    # A count change starts a wait; a transition meanwhile is written at once, counts with it.
    cluster.now += 5
    cluster.running(key, 0)
    assert cluster.reconcile(key) == pytest.approx(COUNTS_DELAY_SECONDS)
    cluster.now += 0.1
    cluster.running(key, 0, 1, 2)
    assert cluster.reconcile(key) is None
    assert len(cluster.writes(key)) == 3
    assert cluster.writes(key)[-1]["activeReplicas"] == "3/3"
    assert cluster.reasons() == [st.Reason.CREATED, st.Reason.RUNNING]

    # The wait that the transition ended is gone: the next count change waits afresh.
    cluster.now += 20
    cluster.running(key, 0, 1)
    assert cluster.reconcile(key) == pytest.approx(COUNTS_DELAY_SECONDS)
    assert len(cluster.writes(key)) == 3


def test_jobs_of_a_namespace_lacking_pods_share_one_failed_create_list(cluster):
    a1, a2, a3 = (cluster.create(n, "a", replicas={"Worker": 2}) for n in ("j1", "j2", "j3"))
    b1 = cluster.create("j4", "b", replicas={"Worker": 2})
    sets = {key: cluster.lacking_workers(key, 2) for key in (a1, a2, a3, b1)}
    cluster.kube.failed["a"] = {
        (sets[a1].name, sets[a1].uid): 'pods "j1-worker-0" is forbidden: exceeded quota',
        ("j9-worker", "sts-of-another-job"): "not j1's",
    }
    for key in (a1, a2, a3, b1):
        assert cluster.reconcile(key) == pytest.approx(CREATE_GRACE_SECONDS)
    assert cluster.calls("failed_creates") == [], "a StatefulSet lacks pods for a moment"

    cluster.now += CREATE_GRACE_SECONDS
    cluster.reconcile(a1)
    cluster.reconcile(a2)
    cluster.now += FAILED_CREATE_SHARED_SECONDS - 0.5
    cluster.reconcile(a3)
    assert cluster.calls("failed_creates") == [("failed_creates", "a")]
    cluster.reconcile(b1)
    assert cluster.calls("failed_creates") == [("failed_creates", "a"), ("failed_creates", "b")]
    waiting = cluster.status(a1)["waiting"]
    assert waiting == {
        f"j1-worker-{i}": 'FailedCreate: pods "j1-worker-0" is forbidden: exceeded quota'
        for i in range(2)
    }
    assert "waiting" not in cluster.status(a2), "another StatefulSet's message is not a2's"
    assert cluster.reasons("j1") == [st.Reason.CREATED] + [st.Reason.POD_WAITING] * 2
    assert cluster.reasons("j2") == [st.Reason.CREATED]

    # Each job looks again every CREATE_CHECK_SECONDS, not on every reconcile.
    cluster.now += 1.0
    cluster.reconcile(a1)
    assert len(cluster.calls("failed_creates")) == 2
    # a1 lists again; a3, looked at last 1.5 s later, shares that list within its window.
    cluster.now = 1000.0 + CREATE_GRACE_SECONDS + CREATE_CHECK_SECONDS
    cluster.reconcile(a1)
    cluster.now += FAILED_CREATE_SHARED_SECONDS - 0.5
    cluster.reconcile(a3)
    assert [c[1] for c in cluster.calls("failed_creates")] == ["a", "b", "a"]
    # Past the window, a job lists anew.
    cluster.now += 1.0
    cluster.reconcile(a2)
    assert [c[1] for c in cluster.calls("failed_creates")] == ["a", "b", "a", "a"]


def test_a_job_that_keeps_lacking_pods_looks_less_and_less_often(cluster):
    """A controller-manager that makes many jobs' pods for minutes: a few looks a job."""
    key = cluster.create("slow", "a", replicas={"Worker": 2})
    cluster.lacking_workers(key, 2)
    cluster.reconcile(key)
    cluster.now += CREATE_GRACE_SECONDS
    waits = []
    for _ in range(5):
        waits.append(cluster.reconcile(key))
        cluster.now += waits[-1]
    assert waits == [10.0, 20.0, 40.0, 60.0, 60.0]
    assert len(cluster.calls("failed_creates")) == 5


def test_a_failed_failed_create_list_is_not_shared(cluster):
    a1, a2 = (cluster.create(n, "a", replicas={"Worker": 1}) for n in ("j1", "j2"))
    for key in (a1, a2):
        cluster.lacking_workers(key, 1)
        cluster.reconcile(key)
    cluster.now += CREATE_GRACE_SECONDS
    cluster.kube.errors["failed_creates"] = api_error(503)
    with pytest.raises(RetryableError):
        cluster.reconcile(a1)
    del cluster.kube.errors["failed_creates"]
    cluster.reconcile(a2)
    assert [c[1] for c in cluster.calls("failed_creates")] == ["a", "a"]


def test_a_job_gone_from_the_index_is_forgotten_whole(cluster):
    key = cluster.create("mnist", replicas={"Worker": 2})
    other = cluster.create("other", replicas={"Worker": 2})
    for k in (key, other):
        cluster.lacking_workers(k, 2)
        cluster.reconcile(k, deliver=False)  # written, and the index behind
    # A StatefulSet that left the spec: deleted on every reconcile until it is gone.
    cluster.sets[key].append(StatefulSetObservation("mnist-ps", "sts-mnist-ps", 1))
    cluster.now += CREATE_GRACE_SECONDS
    cluster.running(key, 0)
    cluster.reconcile(key, deliver=False)  # a count change waits, after the FailedCreate look
    cluster.kube.errors["delete_child"] = api_error(500)
    with pytest.raises(RetryableError):
        cluster.reconcile(key, deliver=False)
    state = cluster.reconciler.state[key]
    # What a queued job keeps (tests/unit/operator/rules/kueue/, tests/integration/test_kueue.py).
    state.queue = QueueView("team-a", "v1beta2")
    state.workloads["tfjob-mnist-1a2b3"] = observe_workload({"metadata": {}})
    cluster.reconciler.pod_deleted(key, stopped_pod(1, 5))
    assert state.departed
    unset = [f.name for f in dataclasses.fields(JobState) if getattr(state, f.name) is None]
    assert unset == [], "the test leaves some of a job's state unexercised"
    assert cluster.reconciler.states() == [("default", "Created")] * 2
    written_rv = cluster.kube.stored[key]["metadata"]["resourceVersion"]
    assert cluster.reconciler.wrote(key, written_rv)

    del cluster.kube.errors["delete_child"]
    calls = len(cluster.kube.calls)
    cluster.delete(key)
    assert cluster.reconcile(key) is None
    assert key not in cluster.reconciler.state
    assert not cluster.reconciler.wrote(key, written_rv)
    assert cluster.reconciler.states() == [("default", "Created")], "only the other job is left"
    assert other in cluster.reconciler.state
    assert "default" in cluster.reconciler.failed_creates.lists, "shared with the other job"
    assert len(cluster.kube.calls) == calls, "a job that is gone costs no call"


def stopped_pod(index: int, step: int) -> dict[str, Any]:
    """A worker being deleted whose container saved at `step` and exited EXIT_STOPPED."""
    body = pod("mnist", "worker", index, state="terminated", exit_code=stop.EXIT_STOPPED)
    body["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = stop.message(step)
    body["metadata"].update(
        deletionTimestamp="2026-01-01T00:02:00Z", deletionGracePeriodSeconds=120
    )
    return body


def test_a_deleted_pods_last_words_reach_the_next_reconcile_once(cluster):
    """The watch may fold a stopped pod's exit into its deletion: its last state is kept for
    the next reconcile, which says what it saved, and then forgotten."""
    key = cluster.create("mnist", replicas={"Worker": 2})
    cluster.running(key, 0, 1)
    cluster.reconcile(key)
    cluster.reconciler.pod_deleted(key, pod("mnist", "worker", 0))  # no stop: nothing kept
    assert not cluster.reconciler.state[key].departed
    cluster.reconciler.pod_deleted(key, stopped_pod(0, 9))
    cluster.running(key, 1)
    cluster.reconcile(key)
    assert cluster.status(key)["lastStop"]["savedStep"] == 9
    assert cluster.reasons().count("Stopped") == 1
    assert not cluster.reconciler.state[key].departed
    cluster.reconcile(key)
    assert cluster.reasons().count("Stopped") == 1


def test_an_unchanged_job_costs_no_call_and_no_event(cluster):
    key = cluster.create("mnist", replicas={"Worker": 2})
    assert cluster.reconcile(key) is None
    calls, events = list(cluster.kube.calls), list(cluster.events)
    assert [c[0] for c in calls] == ["apply"] * 2 + ["patch_status"]
    assert cluster.reconcile(key) is None
    assert cluster.kube.calls == calls
    assert cluster.events == events

    cluster.running(key, 0, 1)
    cluster.reconcile(key)
    calls, events = list(cluster.kube.calls), list(cluster.events)
    assert calls[-1][0] == "patch_status" and "apply" not in {c[0] for c in calls[3:]}
    assert cluster.reconcile(key) is None
    assert cluster.kube.calls == calls
    assert cluster.events == events

    # A child deleted behind our back: the same children are applied again; no status write.
    cluster.reconciler.forget_children(key)
    cluster.reconcile(key)
    assert [c[0] for c in cluster.kube.calls[len(calls) :]] == ["apply"] * 2
    assert cluster.events == events
    # Only a new job's children are created rather than applied: these exist, and are the
    # same children again.
    assert [how for _, *how in cluster.kube.how] == [[True, False]] * 2 + [[False, False]] * 2


def test_a_child_deleted_while_the_children_are_applied_is_applied_again(cluster):
    """The deletion's event comes while a reconcile applies children made before it: that
    reconcile must not record them as applied, or the next one would not make the child."""
    key = cluster.create("mnist", replicas={"Worker": 1})
    apply = cluster.kube.apply

    def deleted_meanwhile(manifest: dict[str, Any], *how: bool) -> None:
        apply(manifest, *how)
        cluster.kube.apply = apply  # once
        cluster.reconciler.forget_children(key)

    cluster.kube.apply = deleted_meanwhile
    cluster.reconcile(key)
    first = [c for c in cluster.kube.calls if c[0] == "apply"]
    assert len(first) == 2
    calls = len(cluster.kube.calls)
    cluster.reconcile(key)
    assert [c for c in cluster.kube.calls[calls:] if c[0] == "apply"] == first
    calls = len(cluster.kube.calls)
    cluster.reconcile(key)
    assert not [c for c in cluster.kube.calls[calls:] if c[0] == "apply"], "then applied once"


def test_a_failure_that_persists_is_said_in_status_once_and_cleared_once_healed(cluster):
    key = cluster.create("mnist", replicas={"Worker": 1})
    cluster.kube.errors["apply"] = api_error(500, "etcd is sad")
    for _ in range(PERSISTENT_ATTEMPTS - 1):
        with pytest.raises(RetryableError):
            cluster.reconcile(key)
    assert cluster.writes(key) == []
    with pytest.raises(RetryableError):
        cluster.reconcile(key)
    assert st.is_true(cluster.status(key), st.Cond.RECONCILE_ERROR)
    assert "etcd is sad" in st.find(cluster.status(key), st.Cond.RECONCILE_ERROR)["message"]
    cluster.kube.errors["apply"] = api_error(500, "etcd is still sad")
    with pytest.raises(RetryableError):
        cluster.reconcile(key)
    assert len(cluster.writes(key)) == 1, "said once, not at every new message"
    assert cluster.reasons().count(st.Reason.RECONCILE_ERROR) == 1
    failing = cluster.reconciler.state[key].failing
    assert failing is not None and failing.reported, "no decision again at every retry"
    assert failing.attempts == PERSISTENT_ATTEMPTS + 1

    del cluster.kube.errors["apply"]
    cluster.reconcile(key)
    assert not st.is_true(cluster.status(key), st.Cond.RECONCILE_ERROR)
    assert cluster.reasons()[-1] == st.Reason.RECONCILED
    assert cluster.reconciler.state[key].failing is None

    # A failure counts afresh, and lasting PERSISTENT_SECONDS is enough.
    cluster.kube.errors["apply"] = api_error(500, "again")
    cluster.reconciler.forget_children(key)
    writes = len(cluster.writes(key))
    with pytest.raises(RetryableError):
        cluster.reconcile(key)
    cluster.now += PERSISTENT_SECONDS
    with pytest.raises(RetryableError):
        cluster.reconcile(key)
    assert len(cluster.writes(key)) == writes + 1
    assert st.is_true(cluster.status(key), st.Cond.RECONCILE_ERROR)


def test_a_standby_touches_nothing_and_a_lease_lost_mid_reconcile_posts_and_writes_nothing(
    cluster,
):
    key = cluster.create("mnist", replicas={"Worker": 1})
    cluster.kube.leading = [False]
    assert cluster.reconcile(key) is None
    assert cluster.kube.calls == []
    assert key not in cluster.reconciler.state

    # At the start; then before the events, which go before the status write that says them
    # (posted at least once: a write that fails is made again with its events).
    cluster.kube.leading = [True, False]
    assert cluster.reconcile(key) is None
    assert cluster.writes(key) == []
    assert cluster.events == []
    cluster.reconcile(key)
    assert len(cluster.writes(key)) == 1 and cluster.reasons() == [st.Reason.CREATED]


@pytest.mark.parametrize(
    ("status", "message", "terminal"),
    [
        (422, 'StatefulSet.apps "x" is invalid: spec.template...containerPort', True),
        (400, "admission webhook denied the request: limits required", True),
        (413, "Request entity too large: limit is 3145728", True),
        (500, "failed to create typed patch object: .spec.x: field not declared in schema", True),
        (500, "etcdserver: request is too large", True),
        (500, "Internal error occurred: connection refused", False),
        (503, "the server is currently unable to handle the request", False),
        (403, 'services "x" is forbidden: exceeded quota: no-services', False),
        (403, 'User "x" cannot patch resource "statefulsets"', False),
        (409, "Operation cannot be fulfilled: the object has been modified", False),
        (429, "Too many requests", False),
    ],
)
def test_what_only_a_spec_change_can_heal(status, message, terminal):
    assert is_terminal(api_error(status, message)) is terminal


def test_a_restart_deletes_every_old_pod_at_once_once_after_the_status_that_says_why(cluster):
    """A new template: no pod is deleted while the view of the StatefulSets is older than
    the operator's last apply; then all of the old revision in one reconcile, after the
    status write that records the stop; the view not showing the deletions yet, none twice."""

    def sets(generation: int, revision: str) -> list[StatefulSetObservation]:
        return [
            StatefulSetObservation(
                f"mnist-{rt}",
                f"uid-sts-{rt}",
                n,
                generation=generation,
                observed_generation=generation,
                update_revision=f"mnist-{rt}-{revision}",
            )
            for rt, n in (("ps", 1), ("worker", 2))
        ]

    def pods(revision: str, deleting: bool = False) -> list[Any]:
        out = []
        for rt, i in (("ps", 0), ("worker", 0), ("worker", 1)):
            body = pod("mnist", rt, i)
            body["metadata"]["labels"]["controller-revision-hash"] = f"mnist-{rt}-{revision}"
            if deleting:
                body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:30Z"
            out.append(observe(body))
        return out

    key = cluster.create("mnist", replicas={"PS": 1, "Worker": 2})
    cluster.kube.generations = {"mnist-ps": 2, "mnist-worker": 2}
    cluster.pods[key] = pods("a")
    cluster.sets[key] = sets(1, "a")  # the view before the apply just made
    cluster.reconcile(key)
    assert cluster.reconciler.state[key].generations == {"mnist-ps": 2, "mnist-worker": 2}
    cluster.sets[key] = sets(1, "a")[:1] + sets(2, "b")[1:]  # the PS one not seen again yet
    cluster.reconcile(key)
    assert not cluster.calls("delete_pod")

    cluster.sets[key] = sets(2, "b")
    done = len(cluster.kube.calls)
    cluster.reconcile(key)
    new = cluster.kube.calls[done:]
    assert [c[0] for c in new] == ["patch_status"] + ["delete_pod"] * 3
    assert new[0][3]["lastStop"]["cause"] == "Updated"
    assert sorted(c[2:] for c in new[1:]) == [
        ("mnist-ps-0", "uid-mnist-ps-0"),
        ("mnist-worker-0", "uid-mnist-worker-0"),
        ("mnist-worker-1", "uid-mnist-worker-1"),
    ]
    assert cluster.reasons().count("Updated") == 1
    done = len(cluster.kube.calls)
    cluster.reconcile(key)  # the watch has not shown the deletions yet
    assert cluster.kube.calls[done:] == []
    cluster.pods[key] = pods("a", deleting=True)
    cluster.reconcile(key)
    assert not cluster.calls("delete_pod")[3:] and not cluster.reconciler.state[key].restarted


def test_a_finished_jobs_statefulsets_are_scaled_down_once_while_the_view_lags(cluster):
    """Write only what changed: a view that still shows the StatefulSets wanting pods asks
    for no second scale-down; once it has shown them at 0, a scale-up is undone again."""

    def sets(replicas: int) -> list[StatefulSetObservation]:
        return [StatefulSetObservation("done-worker", "uid-sts", replicas)]

    key = cluster.create("done", replicas={"Worker": 1})
    cluster.running(key, 0)
    cluster.reconcile(key)
    cluster.pods[key] = [observe(pod("done", "worker", 0, state="terminated", exit_code=0))]
    cluster.sets[key] = sets(1)
    cluster.reconcile(key)
    assert st.state(cluster.status(key)) == "Succeeded"
    assert len(cluster.calls("scale_to_zero")) == 1
    cluster.reconcile(key)  # the watch has not shown the scale-down yet
    assert len(cluster.calls("scale_to_zero")) == 1
    cluster.sets[key] = sets(0)
    cluster.reconcile(key)
    cluster.sets[key] = sets(1)  # scaled up by someone else
    cluster.reconcile(key)
    assert len(cluster.calls("scale_to_zero")) == 2


def test_a_finished_jobs_done_pod_is_deleted_once_with_a_short_grace_before_the_scale_down(
    cluster,
):
    """The worker that ended the job runs again (a StatefulSet's pods always restart): its pod
    is deleted with a 1 s grace period, before the scale-down (a kubelet that has begun a
    deletion's grace period keeps it), and once while the watch lags."""
    key = cluster.create("done", replicas={"Worker": 1})
    cluster.running(key, 0)
    cluster.reconcile(key)
    cluster.pods[key] = [observe(pod("done", "worker", 0, state="terminated", exit_code=0))]
    cluster.sets[key] = [StatefulSetObservation("done-worker", "uid-sts", 1)]
    done = len(cluster.kube.calls)
    cluster.reconcile(key)
    assert st.state(cluster.status(key)) == "Succeeded"
    calls = [c[:5] for c in cluster.kube.calls[done:] if c[0] != "patch_status"]
    assert calls == [
        ("delete_pod", "default", "done-worker-0", "uid-done-worker-0", 1),
        ("scale_to_zero", "default", "done-worker"),
    ]
    rerun = pod("done", "worker", 0, state="running", last_exit=0, restarts=1)
    cluster.pods[key] = [observe(rerun)]
    cluster.reconcile(key)  # the watch has not shown the deletion yet
    assert len(cluster.calls("delete_pod")) == 1
    rerun["metadata"] |= {
        "deletionTimestamp": "2026-01-01T00:00:31Z",
        "deletionGracePeriodSeconds": 1,
    }
    cluster.pods[key] = [observe(rerun)]
    cluster.reconcile(key)
    assert len(cluster.calls("delete_pod")) == 1 and not cluster.reconciler.state[key].ended


def test_a_finished_job_that_waits_for_nothing_keeps_no_parsed_spec(cluster):
    """Memory follows live jobs: a finished job is its record in the index and what was
    written; its spec is parsed again only if it is read again."""
    key = cluster.create("done", replicas={"Worker": 1})
    cluster.running(key, 0)
    cluster.reconcile(key)
    assert cluster.reconciler.state[key].view is not None
    cluster.pods[key] = [observe(pod("done", "worker", 0, state="terminated", exit_code=0))]
    cluster.reconcile(key)
    cluster.pods[key] = []
    while (delay := cluster.reconcile(key)) is not None:
        cluster.now += delay
    assert st.state(cluster.status(key)) == "Succeeded"
    assert cluster.reconciler.state[key].view is None


def test_a_status_write_waits_while_another_jobs_children_are_applied(cluster, monkeypatch):
    """Children before bookkeeping (`apply.ChildrenFirst`): while one job's children are being
    applied, another job's status write waits, and goes once they are."""
    monkeypatch.setattr(apply_module, "STATUS_WAIT_SECONDS", 30.0)
    first = cluster.create("first", replicas={"Worker": 1})
    second = cluster.create("second", replicas={"Worker": 1})
    applying, release = threading.Event(), threading.Event()
    plain_apply = cluster.kube.apply

    def slow_apply(manifest: dict[str, Any], *how: bool) -> int | None:
        if manifest["metadata"]["name"].startswith("first"):
            applying.set()
            assert release.wait(10), "never released"
        return plain_apply(manifest, *how)

    cluster.kube.apply = slow_apply
    gate = cluster.reconciler.children_first
    plain_wait, waiting = gate.wait, asyncio.Event()

    async def spied_wait() -> None:
        waiting.set()
        await plain_wait()

    gate.wait = spied_wait  # type: ignore[method-assign]

    async def both() -> list[str]:
        one = asyncio.create_task(cluster.reconciler(first))
        assert await asyncio.to_thread(applying.wait, 10), "the first job applied nothing"
        two = asyncio.create_task(cluster.reconciler(second))
        await asyncio.wait_for(waiting.wait(), 10)  # the second job's write reached the gate
        for _ in range(10):
            await asyncio.sleep(0)
        assert not cluster.writes(second), "the status write went before the children"
        assert not two.done()
        release.set()
        await asyncio.wait_for(asyncio.gather(one, two), 10)
        return [c[2] for c in cluster.kube.calls if c[0] in ("apply", "patch_status")]

    order = cluster.loop.run_until_complete(both())
    last_apply_of_first = max(i for i, name in enumerate(order) if name.startswith("first-"))
    assert order.index("second") > last_apply_of_first
    assert len(cluster.writes(second)) == 1


def test_a_new_jobs_children_are_created_and_a_change_of_them_is_owned_as_applied(cluster):
    """`Kube.apply`'s ways: a new job's children are created; other children than those
    applied before take over what the create set (a field left out goes); the same children
    again after a start are only applied."""
    key = cluster.create("mnist", replicas={"Worker": 1})
    cluster.reconcile(key)
    assert [how for _, *how in cluster.kube.how] == [[True, False]] * 2
    stored = cluster.kube.stored[key]
    template = stored["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    template["spec"]["containers"][0]["image"] = "trainer:2"
    stored["metadata"]["generation"] = 2
    cluster.deliver(key)
    cluster.kube.how.clear()
    cluster.reconcile(key)
    assert ("mnist-worker", False, True) in cluster.kube.how
    assert all(not fresh for _, fresh, _ in cluster.kube.how)


@pytest.mark.parametrize("edited", [False, True])
def test_after_a_start_a_statefulset_built_otherwise_is_owned_as_applied(cluster, edited):
    """The first apply after a start is plain: most likely the same children again. A
    StatefulSet whose stamp differs from the one it is built with now, its job edited while
    the operator was away, is applied as changed, so a field the edit dropped goes."""
    key = cluster.create("mnist", replicas={"Worker": 1})
    cluster.reconcile(key)
    applied = cluster.kube.applied[("StatefulSet", "mnist-worker")]
    built = applied["metadata"]["annotations"][naming.ANNOTATION_BUILT]
    cluster.reconciler.state.clear()  # a new process
    stamp = "an older spec" if edited else built
    cluster.sets[key] = [StatefulSetObservation("mnist-worker", "sts-mnist", 1, built=stamp)]
    cluster.kube.how.clear()
    cluster.reconcile(key)
    # The worker's Service, then its StatefulSet.
    assert cluster.kube.how == [("mnist-worker", False, False), ("mnist-worker", False, edited)]


def test_a_statefulset_no_tfjob_controls_is_not_adopted_and_is_said_once_it_lasts(cluster):
    """`kubectl delete tfjob --cascade=orphan`, then the job made again: the orphaned
    StatefulSet is in the way, not the job's (its old chief's exit 0 would end the new job at
    once); once that lasts, the job's status and a Warning say so."""
    key = cluster.create("mnist", replicas={"Worker": 1})
    orphan = StatefulSetObservation("mnist-worker", "sts-old", 1, owner="")
    cluster.sets[key] = [orphan]
    done = pod("mnist", "worker", 0, state="terminated", exit_code=0)
    done["metadata"]["ownerReferences"] = [{"uid": "sts-old", "controller": True}]
    cluster.pods[key] = [observe(done)]
    for _ in range(PERSISTENT_ATTEMPTS):
        # A test's StatefulSet with no owner is taken for the job's: this one is no one's.
        cluster.loop.run_until_complete(cluster.reconciler(key))
        cluster.deliver(key)
    assert cluster.calls("apply") == [] and cluster.calls("delete_pod") == []
    status = cluster.status(key)
    assert st.state(status) != "Succeeded"
    error = next(c for c in status["conditions"] if c["type"] == st.Cond.RECONCILE_ERROR)
    assert "StatefulSet mnist-worker is not this TFJob's" in error["message"]
    assert cluster.reasons().count(st.Reason.RECONCILE_ERROR) == 1
