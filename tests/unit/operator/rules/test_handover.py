"""The jobs another controller runs (`runPolicy.managedBy`, or started by Kubeflow's
training-operator): pure rules in tables, and the reconciler's calls for them on its fake
client."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.unit.operator.controller.fakes import Cluster
from tfjob_operator.rules import handover
from tfjob_operator.rules import status as st

NOW = datetime(2026, 11, 25, tzinfo=UTC)


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ({}, None),
        ({"runPolicy": {}}, None),
        ({"runPolicy": {"managedBy": "kubeflow.org/training-operator"}}, None),
        ({"runPolicy": {"managedBy": "tfjob.dev/tfjob-operator"}}, None),
        ({"runPolicy": {"managedBy": ""}}, None),
        ({"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}}, "kueue.x-k8s.io/multikueue"),
        # An invalid spec elsewhere still names its manager.
        ({"tfReplicaSpecs": 3, "runPolicy": {"managedBy": "x.io/y"}}, "x.io/y"),
        ({"runPolicy": "odd"}, None),
        (None, None),
    ],
)
def test_managed_elsewhere(spec, want):
    assert handover.managed_elsewhere(spec) == want


CREATED = {"type": "Created", "status": "True", "reason": "TFJobCreated"}


@pytest.mark.parametrize(
    ("status", "want"),
    [
        (None, False),  # a new job: nothing to look at, no request
        ({}, False),
        ({"conditions": [CREATED], "observedGeneration": 1}, False),  # ours
        ({"conditions": [CREATED]}, True),  # training-operator's
        # training-operator's, finished: its completed pods are no reason to say anything
        ({"conditions": [CREATED, {"type": "Succeeded", "status": "True"}]}, False),
        (
            {
                "conditions": [{"type": "StartedElsewhere", "status": "True"}],
                "observedGeneration": 1,
            },
            True,
        ),
    ],
)
def test_only_a_status_someone_else_wrote_is_looked_into(status, want):
    assert handover.may_be_started_elsewhere(status) == want


def test_started_elsewhere_says_which_children_and_keeps_the_other_conditions():
    prior = {"conditions": [CREATED], "startTime": "2026-01-01T00:00:00Z"}
    assert handover.started_elsewhere(prior, [], "ns/j", NOW) is None
    decision = handover.started_elsewhere(
        prior, ["Pod/j-worker-0", "Service/j-worker-0"], "ns/j", NOW
    )
    assert decision is not None
    cond = st.find(decision.status, st.Cond.STARTED_ELSEWHERE)
    assert cond["status"] == "True" and "Pod/j-worker-0, Service/j-worker-0" in cond["message"]
    assert st.find(decision.status, "Created") == CREATED
    assert decision.patch["conditions"][0] == CREATED, "a merge patch keeps the list whole"
    assert [e[:2] for e in decision.events] == [("Warning", st.Reason.FOREIGN_CHILDREN)]
    assert decision.children == []


def test_a_job_managed_elsewhere_gets_one_event_and_no_call(cluster: Cluster):
    key = cluster.create(
        "multi", replicas={"Worker": 2}, run_policy={"managedBy": "kueue.x-k8s.io/multikueue"}
    )
    cluster.running(key, 0, 1)
    for _ in range(3):
        assert cluster.reconcile(key) is None
    assert cluster.kube.calls == [], "no status, no children, no labels"
    assert cluster.reasons() == [st.Reason.MANAGED_ELSEWHERE]


def test_a_job_started_elsewhere_is_left_alone_until_its_children_are_gone(
    cluster: Cluster,
):
    key = cluster.create("moved", replicas={"Worker": 2})
    cluster.kube.stored[key]["status"] = {"conditions": [CREATED]}  # training-operator's
    cluster.deliver(key)
    cluster.kube.foreign[key] = ["Pod/moved-worker-0"]
    cluster.reconcile(key)
    assert [c[0] for c in cluster.kube.calls] == ["foreign_children", "patch_status"]
    assert st.is_true(cluster.status(key), st.Cond.STARTED_ELSEWHERE)
    cluster.reconcile(key)
    assert [c[0] for c in cluster.kube.calls][2:] == ["foreign_children"], "said once"

    del cluster.kube.foreign[key]  # training-operator's pods were deleted
    cluster.reconcile(key)
    assert "apply" in [c[0] for c in cluster.kube.calls]
    cond = st.find(cluster.status(key), st.Cond.STARTED_ELSEWHERE)
    assert cond["status"] == "False" and cond["reason"] == st.Reason.HANDED_OVER
    calls = len(cluster.kube.calls)
    cluster.reconcile(key)
    assert "foreign_children" not in [c[0] for c in cluster.kube.calls[calls:]], "ours now"
    assert cluster.reasons().count(st.Reason.FOREIGN_CHILDREN) == 1
