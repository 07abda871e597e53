"""Kueue's own integrations and our children: what shows they took one (`pod_takeover`,
`statefulset_takeover`, read into the observations), the Warning that names the fix
(`handover.kueue_took_over`), and the queue label --kueue-manage-all writes on a job once
(`queue_label_patch`)."""

from __future__ import annotations

import pytest

from tfjob_operator.rules import handover, kueue
from tfjob_operator.rules.kueue.queue import Queueing, queue_label_patch
from tfjob_operator.rules.pods import observe
from tfjob_operator.rules.statefulsets import observe_statefulset
from tfjob_testbed.core.jobs import pod

GATE = [{"name": "kueue.x-k8s.io/admission"}]
TOPOLOGY = [{"name": "kueue.x-k8s.io/topology"}]  # ours (TAS), not a take-over


@pytest.mark.parametrize(
    ("labels", "gates", "want"),
    [
        ({}, [], ""),
        ({}, TOPOLOGY, ""),
        ({}, GATE, "scheduling gate kueue.x-k8s.io/admission"),
        ({"kueue.x-k8s.io/managed": "true"}, [], "label kueue.x-k8s.io/managed"),
        ({"kueue.x-k8s.io/managed": "false"}, [], ""),
    ],
)
def test_a_pod_kueue_took(labels, gates, want):
    body = pod("mnist", "worker", 0)
    body["metadata"]["labels"].update(labels)
    body["spec"]["schedulingGates"] = gates
    assert kueue.pod_takeover(body) == want
    observed = observe(body)
    assert observed is not None and observed.kueue_takeover == want


def statefulset(labels=None, annotations=None, gates=None) -> dict:
    return {
        "metadata": {
            "name": "mnist-worker",
            "uid": "u",
            "labels": {"app.kubernetes.io/managed-by": "tfjob-operator", **(labels or {})},
        },
        "spec": {
            "replicas": 2,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {"schedulingGates": gates or []},
            },
        },
    }


@pytest.mark.parametrize(
    ("body", "want"),
    [
        (statefulset(), ""),
        (statefulset(gates=TOPOLOGY), ""),
        (statefulset({"kueue.x-k8s.io/queue-name": "default"}), "label kueue.x-k8s.io/queue-name"),
        (
            statefulset(annotations={"kueue.x-k8s.io/pod-suspending-parent": "statefulset"}),
            "pod template annotation kueue.x-k8s.io/pod-suspending-parent",
        ),
        (statefulset(gates=GATE), "pod template scheduling gate kueue.x-k8s.io/admission"),
    ],
)
def test_a_statefulset_kueue_took(body, want):
    assert kueue.statefulset_takeover(body) == want
    observed = observe_statefulset(body)
    assert observed is not None and observed.kueue_takeover == want


def test_the_warning_names_the_first_child_and_the_fix():
    sets = [observe_statefulset(statefulset({"kueue.x-k8s.io/queue-name": "default"}))]
    gated = pod("mnist", "worker", 1)
    gated["spec"]["schedulingGates"] = GATE
    pods = [observe(pod("mnist", "worker", 0)), observe(gated)]
    assert handover.kueue_took_over("ns/mnist", "tfjob.dev", [], [pods[0]]) is None
    type_, reason, message = handover.kueue_took_over("ns/mnist", "tfjob.dev", sets, pods)
    assert (type_, reason) == ("Warning", "KueueTookOverChild")
    assert "StatefulSet mnist-worker (label kueue.x-k8s.io/queue-name)" in message
    assert "TFJob.v1.tfjob.dev" in message and "externalFrameworks" in message
    _, _, message = handover.kueue_took_over("ns/mnist", "kubeflow.org", [], pods)
    assert "pod mnist-worker-1 (scheduling gate kueue.x-k8s.io/admission)" in message
    assert "TFJob.v1.kubeflow.org" in message


@pytest.mark.parametrize(
    ("labels", "queueing", "want"),
    [
        ({}, None, {}),  # no --kueue
        ({}, Queueing(), {}),  # only labelled jobs are queued
        ({}, Queueing(manage_all=True), {"metadata": {"labels": {kueue.QUEUE_LABEL: "default"}}}),
        (
            {kueue.QUEUE_LABEL: ""},
            Queueing(manage_all=True),
            {"metadata": {"labels": {kueue.QUEUE_LABEL: "default"}}},
        ),
        ({kueue.QUEUE_LABEL: "team"}, Queueing(manage_all=True), {}),  # the user's stays
    ],
)
def test_manage_all_labels_a_job_once_with_its_queue(labels, queueing, want):
    assert queue_label_patch(labels, queueing) == want
