"""What the operator reads from a pod: what keeps it from starting, and how that is said."""

from __future__ import annotations

import pytest

from tfjob_operator.rules.pods import Stuck, observe
from tfjob_testbed.jobs import pod

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
