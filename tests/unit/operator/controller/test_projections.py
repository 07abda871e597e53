"""What the operator keeps of each TFJob."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from tfjob_operator.controller.projections import (
    JOB_METADATA,
    PACKED,
    index_record,
    job_record,
    unpacked,
)
from tfjob_operator.rules.lifecycle import JobView, decide
from tfjob_operator.rules.pods import observe
from tfjob_testbed.core.jobs import pod, tfjob

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def stored(body: dict) -> dict:
    """A TFJob as the API server returns it after `kubectl apply`: managedFields, kubectl's
    copy of the whole spec, labels, and the rest of the metadata."""
    body = copy.deepcopy(body)
    body["metadata"].update(
        {
            "generation": 2,
            "resourceVersion": "1234",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"team": "vision"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}" * 500},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}] * 5,
        }
    )
    return body


def test_a_job_record_keeps_identity_spec_and_status_only():
    body = stored(tfjob(status={"conditions": []}))
    kept = job_record(body)
    assert set(kept) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert set(kept["metadata"]) == {"name", "namespace", "uid", "generation", "resourceVersion"}
    assert set(kept["metadata"]) <= set(JOB_METADATA)
    assert kept["spec"] is body["spec"], "shared, not copied"
    assert len(repr(kept)) * 5 < len(repr(body)), "kubectl's copy and managedFields are gone"


def test_a_deleting_job_keeps_its_deletion_timestamp():
    body = stored(tfjob())
    body["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    assert job_record(body)["metadata"]["deletionTimestamp"] == "2026-01-01T00:01:00Z"


def test_the_rules_decide_the_same_on_the_record_as_on_the_whole_body():
    body = stored(tfjob(replicas={"PS": 1, "Worker": 2}))
    pods = [observe(pod("mnist", "ps", 0)), observe(pod("mnist", "worker", 0))]
    whole = decide(JobView.from_body(body), pods, NOW, "cluster.local")
    kept = decide(JobView.from_body(job_record(body)), pods, NOW, "cluster.local")
    assert kept == whole


FINISHED = {
    "conditions": [
        {"type": "Created", "status": "True", "reason": "TFJobCreated", "message": "m"},
        {"type": "Succeeded", "status": "True", "reason": "TFJobSucceeded", "message": "done"},
    ],
    "completionTime": "2026-01-01T00:00:00Z",
    "replicaStatuses": {"Worker": {"succeeded": 2}},
}


def test_a_finished_job_is_kept_as_its_identity_and_its_packed_spec_and_status():
    body = stored(tfjob(replicas={"PS": 1, "Worker": 2}, status=copy.deepcopy(FINISHED)))
    kept = index_record(body)
    assert set(kept) == {"apiVersion", "kind", "metadata", PACKED}
    assert kept["metadata"]["resourceVersion"] == "1234"
    whole = unpacked(kept)
    assert whole["spec"] == body["spec"] and whole["status"] == body["status"]
    assert whole["spec"] is not unpacked(kept)["spec"], "each caller gets its own"
    assert len(kept[PACKED]) * 2 < len(repr(body["spec"])) + len(repr(body["status"]))


def test_only_the_index_packs_our_own_write_of_a_finished_job_stays_whole():
    """`Reconciler` keeps our last status write as a `job_record` and reads it as it is."""
    body = stored(tfjob(status=copy.deepcopy(FINISHED)))
    assert job_record(body)["status"] is body["status"]


def test_a_running_job_is_not_packed_and_unpacked_gives_it_back_as_it_is():
    for status in ({}, {"conditions": [{"type": "Running", "status": "True"}]}, None):
        body = stored(tfjob(status=status))
        kept = index_record(body)
        assert PACKED not in kept and unpacked(kept) is kept


def test_the_rules_decide_the_same_on_a_packed_record_as_on_the_whole_body():
    body = stored(tfjob(replicas={"PS": 1, "Worker": 2}, status=copy.deepcopy(FINISHED)))
    whole = decide(JobView.from_body(body), [], NOW, "cluster.local")
    kept = decide(JobView.from_body(unpacked(index_record(body))), [], NOW, "cluster.local")
    assert kept == whole


def test_kopf_has_no_change_handler_to_need_a_diff_base():
    """The operator gives kopf no diff-base storage (`handlers._NoDiffBase`): right only while
    it registers no change or spawning handler, which would need one."""
    import kopf

    from tfjob_operator.controller import handlers

    handlers.register()
    registry = kopf.get_default_registry()
    assert registry._changing.get_all_handlers() == []
    assert registry._spawning.get_all_handlers() == []
