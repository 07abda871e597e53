"""TF_CONFIG for every replica mix, as a table over pure functions."""

import json

import pytest

from tfjob_operator.api.spec import ReplicaType as RT
from tfjob_operator.rules import tfconfig


def addr(job, rt, i, ns="ns", domain="cluster.local", port=2222):
    return f"{job}-{rt}-{i}.{job}-{rt}.{ns}.svc.{domain}:{port}"


CASES = [
    pytest.param(
        {RT.PS: 2, RT.WORKER: 3},
        {},
        "cluster.local",
        {
            "ps": [addr("j", "ps", 0), addr("j", "ps", 1)],
            "worker": [addr("j", "worker", i) for i in range(3)],
        },
        id="ps+worker",
    ),
    pytest.param(
        {RT.CHIEF: 1, RT.WORKER: 2, RT.PS: 1},
        {},
        "cluster.local",
        {
            "chief": [addr("j", "chief", 0)],
            "ps": [addr("j", "ps", 0)],
            "worker": [addr("j", "worker", 0), addr("j", "worker", 1)],
        },
        id="chief+worker+ps",
    ),
    pytest.param(
        {RT.WORKER: 4},
        {},
        "cluster.local",
        {"worker": [addr("j", "worker", i) for i in range(4)]},
        id="worker-only",
    ),
    pytest.param(
        {RT.CHIEF: 1, RT.WORKER: 1, RT.PS: 1, RT.EVALUATOR: 1},
        {},
        "cluster.local",
        {
            "chief": [addr("j", "chief", 0)],
            "ps": [addr("j", "ps", 0)],
            "worker": [addr("j", "worker", 0)],
        },
        id="evaluator-left-out",
    ),
    pytest.param(
        {RT.MASTER: 1, RT.WORKER: 1},
        {RT.MASTER: 3000, RT.WORKER: 4000},
        "corp.example",
        {
            "master": [addr("j", "master", 0, domain="corp.example", port=3000)],
            "worker": [addr("j", "worker", 0, domain="corp.example", port=4000)],
        },
        id="master-custom-domain-and-ports",
    ),
    pytest.param(
        {RT.PS: 1, RT.WORKER: 0, RT.CHIEF: 1},
        {},
        "cluster.local",
        {"chief": [addr("j", "chief", 0)], "ps": [addr("j", "ps", 0)]},
        id="zero-replicas-omitted",
    ),
]


@pytest.mark.parametrize(("replicas", "ports", "domain", "want"), CASES)
def test_cluster_spec(replicas, ports, domain, want):
    ports = {rt: ports.get(rt, 2222) for rt in replicas}
    assert tfconfig.cluster_spec("j", "ns", replicas, ports, domain) == want


@pytest.mark.parametrize("rt", list(RT))
@pytest.mark.parametrize("index", [0, 1, 7])
def test_template_expands_to_valid_tf_config(rt, index):
    cluster = {"ps": [addr("j", "ps", 0)], "worker": [addr("j", "worker", 0)]}
    template = tfconfig.tf_config_template(cluster, rt)
    assert "$(TFJOB_TASK_INDEX)" in template
    expanded = tfconfig.expand(template, index)
    parsed = json.loads(expanded)
    assert parsed == {
        "cluster": cluster,
        "task": {"type": rt.task_type, "index": index},
        "environment": "cloud",
    }
    assert expanded == tfconfig.tf_config(cluster, rt, index)
