"""What the operator keeps of each TFJob."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

from tfjob_operator.controller.projections import JOB_METADATA, job_record
from tfjob_operator.rules.lifecycle import JobView, decide
from tfjob_operator.rules.pods import observe
from tfjob_testbed.jobs import pod, tfjob

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


def test_kopf_has_no_change_handler_to_need_a_diff_base():
    """The operator gives kopf no diff-base storage (`handlers._NoDiffBase`): right only while
    it registers no change or spawning handler, which would need one."""
    import kopf

    from tfjob_operator.controller import handlers

    handlers.register()
    registry = kopf.get_default_registry()
    assert registry._changing.get_all_handlers() == []
    assert registry._spawning.get_all_handlers() == []
