"""Which children seen under a job's name are the job's own (`lineage`)."""

from __future__ import annotations

import pytest

from tfjob_operator.api.spec import ReplicaType
from tfjob_operator.rules import lineage
from tfjob_operator.rules.pods import PodObservation, observe
from tfjob_operator.rules.statefulsets import StatefulSetObservation, observe_statefulset

JOB, EARLIER = "job-uid-2", "job-uid-1"


def sts(name: str, uid: str, owner: str) -> StatefulSetObservation:
    return StatefulSetObservation(name, uid, 1, owner=owner)


def pod(name: str, owner: str) -> PodObservation:
    return PodObservation(name, f"pod-{name}-{owner}", ReplicaType.CHIEF, 0, owner=owner)


@pytest.mark.parametrize(
    ("sets", "pods", "want_sets", "want_pods", "earlier"),
    [
        pytest.param(
            [sts("m-chief", "s2", JOB)],
            [pod("m-chief-0", "s2")],
            ["s2"],
            ["m-chief-0"],
            [],
            id="the job's own",
        ),
        pytest.param(
            [],
            [pod("m-chief-0", "s1")],
            [],
            [],
            [],
            id="an earlier job's pod, its StatefulSet gone: not the job's",
        ),
        pytest.param(
            [sts("m-chief", "s2", JOB)],
            [pod("m-chief-0", "s1"), pod("m-worker-0", "s2")],
            ["s2"],
            ["m-worker-0"],
            [],
            id="a new StatefulSet beside an earlier job's pod",
        ),
        pytest.param(
            [sts("m-chief", "s1", EARLIER), sts("m-worker", "s3", JOB)],
            [pod("m-chief-0", "s1")],
            ["s3"],
            [],
            ["m-chief"],
            id="an earlier job's StatefulSet still there: named, to wait for",
        ),
        pytest.param(
            [sts("m-chief", "s2", "")],
            [pod("m-chief-0", "s2")],
            [],
            [],
            ["m-chief"],
            id="orphaned on purpose (--cascade=orphan): in the way, its pods' exits not the job's",
        ),
        pytest.param(
            [sts("m-chief", "s2", JOB)],
            [pod("m-chief-0", ""), pod("m-chief-1", "s2")],
            ["s2"],
            ["m-chief-0", "m-chief-1"],
            [],
            id="a pod of no StatefulSet: its StatefulSet's controller adopts it",
        ),
        pytest.param(
            [],
            [pod("m-chief-0", "s2")],
            [],
            [],
            [],
            id="a pod seen before its StatefulSet waits for it",
        ),
    ],
)
def test_own(sets, pods, want_sets, want_pods, earlier):
    got = lineage.own(JOB, sets, pods)
    assert [s.uid for s in got.sets] == want_sets
    assert [p.name for p in got.pods] == want_pods
    assert got.earlier_sets == earlier


@pytest.mark.parametrize(
    ("refs", "want"),
    [
        ([], ""),
        ([{"uid": "a", "controller": False}], ""),
        ([{"uid": "a"}, {"uid": "b", "controller": True}], "b"),
    ],
)
def test_controller_uid(refs, want):
    assert lineage.controller_uid({"ownerReferences": refs}) == want


def test_observations_carry_their_controller():
    ref = [{"uid": "u-1", "controller": True, "kind": "StatefulSet", "name": "m-chief"}]
    p = observe(
        {
            "metadata": {
                "name": "m-chief-0",
                "uid": "p",
                "labels": {"tfjob.dev/replica-type": "chief"},
                "ownerReferences": ref,
            }
        }
    )
    assert p is not None and p.owner == "u-1"
    s = observe_statefulset(
        {
            "metadata": {
                "name": "m-chief",
                "uid": "s",
                "labels": {"app.kubernetes.io/managed-by": "tfjob-operator"},
                "ownerReferences": [{**ref[0], "uid": "job"}],
            }
        }
    )
    assert s is not None and s.owner == "job"
