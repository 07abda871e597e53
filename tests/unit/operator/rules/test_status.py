"""Condition rules (Kubeflow's) and the merge patch that writes a status in one go."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tfjob_operator.rules import status as st

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def types(status):
    return [(c["type"], c["status"]) for c in status["conditions"]]


def test_running_and_restarting_replace_each_other():
    s: dict = {}
    st.set_condition(s, "Created", True, "TFJobCreated", "", T0)
    st.set_condition(s, "Running", True, "TFJobRunning", "", T0)
    st.set_condition(s, "Restarting", True, "TFJobRestarting", "", T0)
    assert types(s) == [("Created", "True"), ("Restarting", "True")]
    st.set_condition(s, "Running", True, "TFJobRunning", "", T0)
    assert types(s) == [("Created", "True"), ("Running", "True")]


@pytest.mark.parametrize("final", ["Succeeded", "Failed", "Suspended"])
def test_terminal_and_suspended_turn_running_false(final):
    s: dict = {}
    st.set_condition(s, "Running", True, "TFJobRunning", "", T0)
    st.set_condition(s, final, True, "R", "m", T0 + timedelta(seconds=5))
    assert types(s) == [("Running", "False"), (final, "True")]
    assert s["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:05Z"
    assert st.state(s) == final


def test_same_condition_again_changes_nothing():
    s: dict = {}
    assert st.set_condition(s, "Running", True, "TFJobRunning", "first", T0)
    before = [dict(c) for c in s["conditions"]]
    assert not st.set_condition(s, "Running", True, "TFJobRunning", "other", T0 + timedelta(1))
    assert s["conditions"] == before
    assert not st.set_condition(s, "Suspended", False, "X", "", T0), "no False for unseen types"


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        ({"a": 1}, {"a": 1}, {}),
        ({"a": 1}, {"a": 2}, {"a": 2}),
        ({"a": 1, "failure": {"pod": "p"}}, {"a": 1}, {"failure": None}),
        (
            {"t": {"p0": {"count": 1}, "p1": {"count": 2}}},
            {"t": {"p0": {"count": 3}}},
            {"t": {"p0": {"count": 3}, "p1": None}},
        ),
        ({"conditions": [1, 2]}, {"conditions": [1, 2, 3]}, {"conditions": [1, 2, 3]}),
        ({}, {"x": {"y": 1}}, {"x": {"y": 1}}),
    ],
)
def test_merge_patch(old, new, patch):
    assert st.merge_patch(old, new) == patch


def conditioned(*types_, restarts=0, start=None, end=None):
    s: dict = {"restarts": restarts}
    for t in types_:
        st.set_condition(s, t, True, t, "", T0)
    if start is not None:
        s["startTime"] = st.timestamp(T0 + timedelta(seconds=start))
    if end is not None:
        s["completionTime"] = st.timestamp(T0 + timedelta(seconds=end))
    return s


@pytest.mark.parametrize(
    ("before", "after", "want"),
    [
        ({}, conditioned("Created"), dict(created=True)),
        (conditioned("Created"), conditioned("Created", "Running"), {}),
        (
            conditioned("Created", "Running", restarts=1),
            conditioned("Created", "Restarting", restarts=3),
            dict(restarted=2),
        ),
        (
            conditioned("Created", "Running", start=0),
            conditioned("Created", "Succeeded", start=0, end=95),
            dict(succeeded=True, duration=95.0),
        ),
        (
            conditioned("Created", "Running"),
            conditioned("Created", "Failed", start=10, end=70),
            dict(failed=True, duration=60.0),
        ),
        # An invalid spec fails at once: created and failed in one write, no start time.
        ({}, conditioned("Created", "Failed", end=0), dict(created=True, failed=True)),
        # Already finished: a later write (replica counts) is no news.
        (conditioned("Created", "Succeeded"), conditioned("Created", "Succeeded"), {}),
    ],
)
def test_changes_for_the_job_metrics(before, after, want):
    base = dict(created=False, succeeded=False, failed=False, restarted=0, duration=None)
    assert st.changes(before, after) == base | want


@pytest.mark.parametrize(
    ("patch", "counts_only"),
    [
        ({}, False),
        ({"activeReplicas": "2/3"}, True),
        ({"activeReplicas": "3/3", "replicaStatuses": {"Worker": {"active": 2}}}, True),
        ({"activeReplicas": "3/3", "conditions": [{"type": "Running"}]}, False),
        ({"replicaStatuses": {"Worker": {"active": 0}}, "terminations": {"x": None}}, False),
        ({"waiting": {"mnist-worker-0": "ErrImagePull"}}, False),
        ({"restarts": 1, "activeReplicas": "1/2"}, False),
    ],
)
def test_which_patches_only_count_pods(patch, counts_only):
    assert st.counts_only(patch) is counts_only
