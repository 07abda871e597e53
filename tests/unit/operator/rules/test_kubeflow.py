"""Kubeflow's labels on what the operator makes: pure rules in tables, and the reconciler's
calls for them on its fake client. (The jobs another controller runs: test_handover.py.)"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.unit.operator.controller.fakes import Cluster
from tfjob_operator.api.spec import API_VERSION, ReplicaType
from tfjob_operator.rules import kubeflow
from tfjob_operator.rules.lifecycle import JobView, decide
from tfjob_operator.rules.pods import observe
from tfjob_testbed.core.jobs import pod, tfjob

NOW = datetime(2026, 11, 25, tzinfo=UTC)
CHIEF, PS, WORKER, EVAL = (
    ReplicaType.CHIEF,
    ReplicaType.PS,
    ReplicaType.WORKER,
    ReplicaType.EVALUATOR,
)
INDEX, ROLE = kubeflow.REPLICA_INDEX, kubeflow.JOB_ROLE


@pytest.mark.parametrize(
    ("rt", "index", "has_chief", "want"),
    [
        (WORKER, 0, False, {INDEX: "0", ROLE: "master"}),  # worker 0 leads a job without Chief
        (WORKER, 0, True, {INDEX: "0"}),
        (WORKER, 3, False, {INDEX: "3"}),
        (PS, 0, False, {INDEX: "0"}),  # a parameter server is never the master
        (CHIEF, 0, True, {}),  # one pod: its template says it all
        (ReplicaType.MASTER, 0, True, {}),
        (EVAL, 0, True, {}),
    ],
)
def test_per_pod_labels(rt, index, has_chief, want):
    assert kubeflow.pod_labels(rt, index, has_chief) == want


@pytest.mark.parametrize(
    ("rt", "want"),
    [
        (CHIEF, {INDEX: "0", ROLE: "master"}),
        (ReplicaType.MASTER, {INDEX: "0", ROLE: "master"}),
        (EVAL, {INDEX: "0"}),
        (WORKER, {}),
        (PS, {}),
    ],
)
def test_template_labels(rt, want):
    labels = kubeflow.template_labels("mnist", rt)
    common = {
        kubeflow.JOB_NAME: "mnist",
        kubeflow.REPLICA_TYPE: rt.value.lower(),
        kubeflow.OPERATOR_NAME: "tfjob-controller",
    }
    assert labels == {**common, **want}


def test_only_missing_or_wrong_labels_are_patched():
    pods = [
        ("j-worker-0", "u0", WORKER, 0, {}),
        ("j-worker-1", "u1", WORKER, 1, {INDEX: "1"}),  # done
        ("j-worker-2", "u2", WORKER, 2, {INDEX: "7"}),  # wrong: a user's edit
        ("j-ps-0", "u3", PS, 0, {INDEX: "0"}),
    ]
    assert kubeflow.pod_label_patches(pods, has_chief=False) == [
        ("j-worker-0", "u0", {INDEX: "0", ROLE: "master"}),
        ("j-worker-2", "u2", {INDEX: "2"}),
    ]


def children_of(replicas: dict[str, int], api_version: str = API_VERSION) -> list[dict]:
    body = tfjob("mnist", replicas=replicas)
    body["apiVersion"] = api_version
    return decide(JobView.from_body(body), [], NOW, "cluster.local").children


def test_services_and_pod_templates_carry_kubeflows_labels_and_the_claim_does_not():
    for child in children_of({"Chief": 1, "PS": 2, "Worker": 2}):
        labels = child["metadata"]["labels"]
        if child["kind"] == "StatefulSet":
            rt = labels["tfjob.dev/replica-type"]
            tpl = child["spec"]["template"]["metadata"]["labels"]
            assert tpl[kubeflow.JOB_NAME] == "mnist" and tpl[kubeflow.REPLICA_TYPE] == rt
            assert (tpl.get(ROLE) == "master") == (rt == "chief")
            # The selector stays ours: immutable, and unchanged for jobs made before.
            assert set(child["spec"]["selector"]["matchLabels"]) == {
                "tfjob.dev/job-name",
                "tfjob.dev/replica-type",
            }
        if child["kind"] == "Service":
            assert labels[kubeflow.JOB_NAME] == "mnist"


@pytest.mark.parametrize("api_version", ["tfjob.dev/v1", "kubeflow.org/v1"])
def test_children_are_owned_by_the_tfjob_of_its_own_group(api_version):
    for child in children_of({"Worker": 1}, api_version):
        (owner,) = child["metadata"]["ownerReferences"]
        assert owner["apiVersion"] == api_version and owner["kind"] == "TFJob"


def test_tensorboard_pods_are_not_job_pods_for_kubeflow_clients():
    body = tfjob(
        "mnist", replicas={"Worker": 1}, checkpoint={"storage": {"size": "1Gi"}}, tensorboard={}
    )
    for child in decide(JobView.from_body(body), [], NOW, "cluster.local").children:
        if child["kind"] == "Deployment":
            tpl = child["spec"]["template"]["metadata"]["labels"]
            assert (
                kubeflow.JOB_NAME not in tpl
                and kubeflow.JOB_NAME not in child["metadata"]["labels"]
            )


@pytest.mark.parametrize("api_version", ["kubeflow.org/v1", "tfjob.dev/v1"])
def test_a_decision_labels_the_pods_that_lack_it_in_kubeflows_group_only(api_version):
    """A write per pod, for the clients that read it: Kubeflow's, which look at kubeflow.org
    jobs only."""
    body = tfjob("mnist", replicas={"PS": 2, "Worker": 2})
    body["apiVersion"] = api_version
    labelled = pod("mnist", "worker", 1)
    labelled["metadata"]["labels"][INDEX] = "1"
    # Not started yet: labelled once its container runs, not in the burst of the job's creation.
    pending = pod("mnist", "ps", 1, state="waiting", reason="ContainerCreating")
    pods = [observe(p) for p in (pod("mnist", "ps", 0), pod("mnist", "worker", 0), labelled)]
    pods.append(observe(pending))
    decision = decide(JobView.from_body(body), pods, NOW, "cluster.local")
    assert decision.label_pods == [
        ("mnist-ps-0", "uid-mnist-ps-0", {INDEX: "0"}),
        ("mnist-worker-0", "uid-mnist-worker-0", {INDEX: "0", ROLE: "master"}),
    ] * (api_version == "kubeflow.org/v1")


def test_each_pod_is_labelled_once(cluster: Cluster):
    key = cluster.create("mnist", replicas={"Worker": 2}, api_version="kubeflow.org/v1")
    cluster.running(key, 0, 1)
    cluster.reconcile(key)
    cluster.reconcile(key)  # the watch has not brought the labels yet
    assert [c[1:] for c in cluster.calls("label_pod")] == [
        ("default", "mnist-worker-0", {INDEX: "0", ROLE: "master"}),
        ("default", "mnist-worker-1", {INDEX: "1"}),
    ]
    assert cluster.reconciler.state[key].labelled == {"uid-mnist-worker-0", "uid-mnist-worker-1"}
    # The labels arrive: nothing more to remember.
    labelled = []
    for i in (0, 1):
        body = pod("mnist", "worker", i)
        body["metadata"]["labels"].update(kubeflow.pod_labels(WORKER, i, has_chief=False))
        labelled.append(observe(body))
    cluster.pods[key] = labelled
    cluster.reconcile(key)
    assert len(cluster.calls("label_pod")) == 2
    assert cluster.reconciler.state[key].labelled == set()


def test_a_pod_being_deleted_is_active_until_its_container_stops():
    """Kueue releases a preempted job's quota once every active count is 0: a pod that is
    being deleted but still runs holds its node's resources."""
    body = tfjob("mnist", replicas={"Worker": 2}, run_policy={"suspend": True})
    going = pod("mnist", "worker", 0)
    going["metadata"]["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    stopped = pod("mnist", "worker", 1, state="terminated", exit_code=143)
    stopped["metadata"]["deletionTimestamp"] = "2026-11-25T00:00:00Z"
    decision = decide(JobView.from_body(body), [observe(going), observe(stopped)], NOW, "")
    assert decision.status["replicaStatuses"]["Worker"]["active"] == 1
    decision = decide(JobView.from_body(body), [observe(stopped)], NOW, "")
    assert decision.status["replicaStatuses"]["Worker"]["active"] == 0


@pytest.mark.parametrize("value", ["i-vk7ftv6i", "kueue/", "/x", "a/" + "b" * 62, "Kueue.io/x"])
def test_managed_by_is_a_domain_prefixed_path(value):
    from tfjob_operator.api.spec import SpecError, parse_spec

    spec = tfjob(replicas={"Worker": 1}, run_policy={"managedBy": value})["spec"]
    with pytest.raises(SpecError, match=r"spec\.runPolicy\.managedBy"):
        parse_spec(spec)


@pytest.mark.parametrize(
    "module", ["tfjob_operator.controller.main", "tfjob_operator.cli.commands"]
)
def test_an_unknown_api_group_from_the_environment_is_refused(module, monkeypatch, capsys):
    import importlib

    monkeypatch.setenv("TFJOB_API_GROUP", "kubeflow.com")
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as exit_:
        main(["get"] if module.endswith("cli.commands") else [])
    assert exit_.value.code == 2
    assert "kubeflow.org" in capsys.readouterr().err
