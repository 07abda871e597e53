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


# enableDynamicWorker: what each task sees of a job with a chief, 2 PS, 3 workers and an
# evaluator (Kubeflow's sparse cluster spec, with the chief and the evaluator given what they
# need instead of Kubeflow's empty cluster).
FULL = {
    "chief": [addr("j", "chief", 0)],
    "ps": [addr("j", "ps", 0), addr("j", "ps", 1)],
    "worker": [addr("j", "worker", i) for i in range(3)],
}
SPARSE = [
    pytest.param(FULL, RT.PS, 1, {"ps": {"1": addr("j", "ps", 1)}}, id="ps-sees-itself"),
    pytest.param(
        FULL,
        RT.WORKER,
        2,
        {"ps": FULL["ps"], "worker": {"2": addr("j", "worker", 2)}},
        id="worker-sees-every-ps-and-itself",
    ),
    pytest.param(
        {"worker": FULL["worker"]},
        RT.WORKER,
        0,
        {"worker": {"0": addr("j", "worker", 0)}},
        id="worker-without-ps",
    ),
    pytest.param(FULL, RT.CHIEF, 0, FULL, id="chief-sees-every-task-as-lists"),
    pytest.param(
        {"master": [addr("j", "master", 0)], "worker": FULL["worker"]},
        RT.MASTER,
        0,
        {"master": [addr("j", "master", 0)], "worker": FULL["worker"]},
        id="master-as-chief",
    ),
    pytest.param(
        FULL,
        RT.EVALUATOR,
        0,
        {"evaluator": [addr("j", "evaluator", 0)], "chief": FULL["chief"]},
        id="evaluator-sees-itself-and-the-chief",
    ),
    pytest.param(
        {"ps": FULL["ps"], "worker": FULL["worker"]},
        RT.EVALUATOR,
        0,
        {"evaluator": [addr("j", "evaluator", 0)], "worker": {"0": addr("j", "worker", 0)}},
        id="evaluator-without-chief-sees-worker-0",
    ),
]


@pytest.mark.parametrize(("cluster", "rt", "index", "want"), SPARSE)
def test_sparse_cluster_of_each_task(cluster, rt, index, want):
    own = addr("j", rt.task_type, index)
    assert tfconfig.sparse_cluster(cluster, rt, str(index), own) == want


@pytest.mark.parametrize(("cluster", "rt", "index", "want"), SPARSE)
def test_sparse_template_expands_in_keys_and_values(cluster, rt, index, want):
    """The pod template holds `$(TFJOB_TASK_INDEX)` in the worker's own key and address too;
    what Kubernetes makes of it for pod `index` is that task's TF_CONFIG, valid JSON."""
    ref = tfconfig.INDEX_REFERENCE
    view = tfconfig.sparse_cluster(cluster, rt, ref, addr("j", rt.task_type, ref))
    template = tfconfig.tf_config_template(view, rt)
    expanded = tfconfig.expand(template, index)
    assert ref not in expanded
    assert json.loads(expanded) == {
        "cluster": want,
        "task": {"type": rt.task_type, "index": index},
        "environment": "cloud",
    }
    assert expanded == tfconfig.tf_config(want, rt, index)


def test_a_worker_count_changes_only_what_the_chief_sees():
    """The point of the sparse spec: with more workers, a PS's and a worker's TF_CONFIG stay
    as they were (their pods keep running); the chief's changes."""
    ref = tfconfig.INDEX_REFERENCE

    def templates(workers):
        cluster = {**FULL, "worker": [addr("j", "worker", i) for i in range(workers)]}
        return {
            rt: tfconfig.tf_config_template(
                tfconfig.sparse_cluster(cluster, rt, ref, addr("j", rt.task_type, ref)), rt
            )
            for rt in (RT.CHIEF, RT.PS, RT.WORKER, RT.EVALUATOR)
        }

    before, after = templates(2), templates(3)
    assert [rt for rt in before if before[rt] != after[rt]] == [RT.CHIEF]


@pytest.mark.parametrize(
    "replicas",
    [
        {RT.WORKER: 1},
        {RT.PS: 2, RT.CHIEF: 1, RT.WORKER: 500, RT.EVALUATOR: 1},
        {RT.PS: 1, RT.WORKER: 1999},
        {RT.WORKER: 10000},
    ],
)
def test_the_counted_size_bounds_the_rendered_one_closely(replicas):
    ports = {rt: 65535 for rt in replicas}
    rendered = len(json.dumps(tfconfig.cluster_spec("mnist-x", "team", replicas, ports, "c.l")))
    counted = tfconfig.cluster_size("mnist-x", "team", replicas, "c.l")
    assert rendered <= counted <= rendered + 64


@pytest.mark.parametrize(
    ("workers", "large"),
    [(1, False), (1500, False), (2100, True), (10**6, True)],
)
def test_a_tf_config_no_container_could_start_with_is_refused(workers, large):
    why = tfconfig.too_large("mnist", "default", {RT.PS: 1, RT.WORKER: workers}, "cluster.local")
    assert (why is not None) == large
    if large:
        assert f"{workers + 1} tasks" in why and str(tfconfig.MAX_ARG_STRLEN) in why
