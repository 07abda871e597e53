"""A replica's restartPolicy as the TensorFlow container's own restart rules: the kubelet
restarts exactly the exits the operator retries, and a task's end is final."""

from __future__ import annotations

import pytest

from tfjob_operator.api.spec import API_VERSION, KUBEFLOW_GROUP, RestartPolicy, parse_spec
from tfjob_operator.rules import naming, restartpolicy
from tfjob_operator.rules.children import JobRef, desired_children
from tfjob_protocol import stop
from tfjob_testbed.core.jobs import kubelet_restarts, tfjob

CODES = range(256)


@pytest.mark.parametrize("policy", list(RestartPolicy))
def test_the_kubelet_restarts_exactly_the_exits_the_operator_retries(policy):
    container = {"name": "tensorflow", **restartpolicy.container_restart(policy)}
    restarted = {code for code in CODES if kubelet_restarts(container, code)}
    retried = {code for code in CODES if code and restartpolicy.is_retryable(policy, code)}
    assert restarted == retried
    assert 0 not in restarted  # a task that succeeded is never run again
    assert stop.EXIT_STOPPED in restarted  # a stop on request resumes


@pytest.mark.parametrize(
    ("policy", "own", "restarts"),
    [
        (RestartPolicy.NEVER, "Never", [stop.EXIT_STOPPED]),
        (RestartPolicy.EXIT_CODE, "Never", list(range(128, 256))),
        (RestartPolicy.ON_FAILURE, "OnFailure", None),
        (RestartPolicy.ALWAYS, "OnFailure", None),
    ],
)
def test_each_policy_as_kubernetes_validates_it(policy, own, restarts):
    rendered = restartpolicy.container_restart(policy)
    assert rendered["restartPolicy"] == own
    rules = rendered.get("restartPolicyRules")
    if restarts is None:
        assert rules is None
        return
    (rule,) = rules  # Kubernetes takes at most 20 rules of at most 255 codes each
    assert rule == {"action": "Restart", "exitCodes": {"operator": "In", "values": restarts}}
    assert len(rule["exitCodes"]["values"]) <= 255


def _pod_templates(api_version, policy, rules):
    body = tfjob("mnist", replicas={"Chief": 1, "Worker": 2}, restart_policy=policy)
    job = JobRef("mnist", "ml", "uid-1", api_version)
    made = desired_children(job, parse_spec(body["spec"]), "cluster.local", restart_rules=rules)
    return [c["spec"]["template"] for c in made if c["kind"] == "StatefulSet"]


@pytest.mark.parametrize("policy", [p.value for p in RestartPolicy])
@pytest.mark.parametrize(
    ("api_version", "rules"),
    [(API_VERSION, True), (f"{KUBEFLOW_GROUP}/v1", True), (API_VERSION, False)],
    ids=["served", "served-kubeflow", "not-served"],
)
def test_rendering_by_policy_and_server(policy, api_version, rules):
    for template in _pod_templates(api_version, policy, rules):
        assert template["spec"]["restartPolicy"] == "Always"  # all a StatefulSet takes
        (container,) = template["spec"]["containers"]
        finalizers = template["metadata"].get("finalizers") or []
        if not rules:
            assert "restartPolicy" not in container and "restartPolicyRules" not in container
            assert finalizers == []
            continue
        want = restartpolicy.container_restart(RestartPolicy(policy))
        assert {k: container.get(k) for k in want} == want
        assert finalizers == [naming.finalizer(api_version.partition("/")[0])]


def test_a_users_own_finalizers_are_kept_and_ours_is_not_doubled():
    body = tfjob("mnist", replicas={"Worker": 1})
    meta = body["spec"]["tfReplicaSpecs"]["Worker"]["template"].setdefault("metadata", {})
    meta["finalizers"] = ["example.com/keep", naming.finalizer("tfjob.dev")]
    job = JobRef("mnist", "ml", "uid-1")
    made = desired_children(job, parse_spec(body["spec"]), "cluster.local", restart_rules=True)
    (sts,) = [c for c in made if c["kind"] == "StatefulSet"]
    assert sts["spec"]["template"]["metadata"]["finalizers"] == [
        "example.com/keep",
        "tfjob.dev/task-ended",
    ]


@pytest.mark.parametrize(
    ("returned", "kept"),
    [
        (restartpolicy.probe("ns"), True),  # 1.35+: the fields come back
        (
            {"spec": {"template": {"spec": {"containers": [{"name": "probe"}]}}}},
            False,  # an older server drops what it does not know
        ),
        ({}, False),
    ],
)
def test_the_probe_tells_a_server_that_keeps_rules(returned, kept):
    assert restartpolicy.keeps_rules(returned) is kept
