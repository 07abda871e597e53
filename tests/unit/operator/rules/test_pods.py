"""What the operator reads from a pod: what keeps it from starting, and how that is said."""

from __future__ import annotations

import pytest

from tfjob_operator.rules import status as st
from tfjob_operator.rules.pods import Stuck, observe
from tfjob_protocol import stop
from tfjob_testbed.core.jobs import pod

UNSCHEDULABLE = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
}


@pytest.mark.parametrize(
    ("container", "conditions", "stuck"),
    [
        ({}, [], None),
        ({"state": "waiting"}, [], None),  # CrashLoopBackOff: the exits tell that story
        ({"state": "waiting", "reason": "ContainerCreating"}, [], None),
        ({"state": "waiting", "reason": "PodInitializing"}, [], None),
        (
            {"state": "waiting", "reason": "ImagePullBackOff", "message": 'pulling "x:1"'},
            [],
            Stuck("ImagePullBackOff", 'pulling "x:1"'),
        ),
        (
            {"state": "waiting", "reason": "CreateContainerConfigError", "message": "no secret"},
            [],
            Stuck("CreateContainerConfigError", "no secret"),
        ),
        (None, [UNSCHEDULABLE], Stuck("Unschedulable", UNSCHEDULABLE["message"])),
        (None, [{**UNSCHEDULABLE, "status": "True"}], None),
        (
            None,
            [{**UNSCHEDULABLE, "reason": "SchedulerError", "message": "priority differs"}],
            Stuck("SchedulerError", "priority differs"),
        ),
        # Held by a scheduling gate (Kueue's, say) on purpose: nothing to say.
        (None, [{**UNSCHEDULABLE, "reason": "SchedulingGated", "message": ""}], None),
    ],
)
def test_what_keeps_a_pod_from_starting(container, conditions, stuck):
    body = pod("mnist", "worker", 0, **(container or {}))
    if container is None:
        body["status"] = {"phase": "Pending"}
    body["status"]["conditions"] = conditions
    assert observe(body).stuck == stuck


def test_stuck_message_is_cut_to_a_readable_length():
    assert len(Stuck("ErrImagePull", "x" * 5000).describe()) == 300


def test_a_stop_on_request_is_read_with_the_step_its_message_names():
    body = pod("mnist", "worker", 0, state="terminated", exit_code=stop.EXIT_STOPPED)
    terminated = body["status"]["containerStatuses"][0]["state"]["terminated"]
    terminated["message"] = stop.message(1200)
    ex = observe(body).exit
    assert ex.stopped and ex.saved_step == 1200
    terminated["message"] = "x" * 5000  # a message of the user's own: kept short, no step
    ex = observe(body).exit
    assert ex.stopped and ex.saved_step is None and len(ex.message) == 300
    terminated.update(exitCode=1, message=stop.message(3))
    assert observe(body).exit.saved_step is None, "only a stop names a step saved"


def test_who_deletes_a_pod_is_read_only_while_it_is_being_deleted():
    body = pod("mnist", "worker", 0)
    body["status"]["conditions"] = [
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    ]
    assert (observe(body).deleted_at, observe(body).disruption) == (None, "")
    body["metadata"].update(deletionTimestamp="2026-01-01T00:02:00Z", deletionGracePeriodSeconds=90)
    seen = observe(body)
    assert st.timestamp(seen.deleted_at) == "2026-01-01T00:00:30Z", "its grace counted back"
    assert seen.disruption == "PreemptionByScheduler"


def test_the_template_revision_a_pod_was_made_from_is_read():
    body = pod("mnist", "worker", 0)
    assert observe(body).revision == ""
    body["metadata"]["labels"]["controller-revision-hash"] = "mnist-worker-7d9c"
    assert observe(body).revision == "mnist-worker-7d9c"
