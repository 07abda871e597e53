"""TF_CONFIG parsing in the trainer, and the contract with the operator's TF_CONFIG builder."""

from __future__ import annotations

import json

import pytest

from tfjob_operator.api.spec import ReplicaType as RT
from tfjob_operator.rules import tfconfig
from tfjob_trainer import config
from tfjob_trainer.config import ConfigError, Task

CLUSTER = {"ps": ["p0:2222"], "worker": ["w0:2222", "w1:2222"]}


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        (
            '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}',
            ("worker", 0),
        ),
        (
            '{"cluster": {"worker": ["a:1"]}, "task": {"type": "evaluator", "index": 0}}',
            ("evaluator", 0),
        ),
    ],
)
def test_parse(raw, want):
    task = config.parse(raw)
    assert (task.type, task.index) == want
    assert json.loads(task.tf_config())["task"] == {"type": want[0], "index": want[1]}


POD_INDEX = (
    "Kubernetes fills it from the pod's apps.kubernetes.io/pod-index label, which StatefulSet "
    "pods carry on Kubernetes 1.28 and later; outside the operator, set task.index to this "
    "task's number"
)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (
            '{"cluster": {"ps": ["p:1"], "worker": ["a:1", "b:1"]}, "task": {"index": , '
            '"type": "worker"}}',
            f"TF_CONFIG task.index is empty: {POD_INDEX}",
        ),
        (
            '{"cluster": {"ps": ["p:1"], "worker": ["a:1"]}, "task": {"index": $(TFJOB_TASK_INDEX),'
            ' "type": "ps"}}',
            f"TF_CONFIG task.index is the unexpanded $(TFJOB_TASK_INDEX): {POD_INDEX}",
        ),
        (
            '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker"}}',
            "TF_CONFIG task has no 'index': it must be this task's number, 0 or more",
        ),
        (
            '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": "1"}}',
            "TF_CONFIG task.index must be this task's number, 0 or more, not '1'",
        ),
        (
            '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": null}}',
            "TF_CONFIG task.index must be this task's number, 0 or more, not None",
        ),
    ],
)
def test_an_index_not_filled_in_fails_in_one_line(raw, says):
    """No fallback to the hostname: the index is TF_CONFIG's, or the configuration is wrong."""
    with pytest.raises(ConfigError) as e:
        config.parse(raw)
    assert str(e.value) == says
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (
            '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 1}}',
            "out of range",
        ),
        (
            '{"cluster": {"worker": ["a"]}, "task": {"type": "worker", "index": 0}}',
            "host:port",
        ),
        ('{"cluster": {}, "task": {"type": "worker", "index": 0}}', "no 'cluster'"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_parse_errors(raw, says):
    with pytest.raises(ConfigError, match=says):
        config.parse(raw)


def task(cluster, type_="worker", index=0):
    return config.Task(cluster=cluster, type=type_, index=index)


@pytest.mark.parametrize(
    ("cluster", "type_", "requested", "want"),
    [
        (
            {"chief": ["c:1"], "ps": ["p:1"], "worker": ["w:1"]},
            "worker",
            "auto",
            "parameter-server",
        ),
        ({"worker": ["a:1", "b:1"]}, "worker", "auto", "multi-worker-mirrored"),
        ({"chief": ["c:1"], "worker": ["a:1"]}, "chief", "auto", "multi-worker-mirrored"),
        ({"worker": ["a:1"]}, "worker", "auto", "mirrored"),
        ({"ps": ["p:1"], "worker": ["a:1"]}, "ps", "auto", "between-graph"),
    ],
)
def test_auto_strategy(cluster, type_, requested, want):
    assert config.resolve_strategy(requested, task(cluster, type_)) == want


@pytest.mark.parametrize(
    ("cluster", "requested", "says"),
    [
        ({"ps": ["p:1"], "worker": ["w:1"]}, "parameter-server", "needs a chief"),
        ({"worker": ["a:1", "b:1"]}, "mirrored", "runs in one process"),
        ({"worker": ["a:1"], "evaluator": ["e:1"]}, "auto", "must not list the evaluator"),
    ],
)
def test_strategy_misfits(cluster, requested, says):
    with pytest.raises(ConfigError, match=says):
        config.resolve_strategy(requested, task(cluster))


def test_chief_rules():
    assert task({"worker": ["a:1", "b:1"]}).is_chief
    assert not task({"worker": ["a:1", "b:1"]}, index=1).is_chief
    assert not task({"chief": ["c:1"], "worker": ["a:1"]}).is_chief
    assert task({"master": ["m:1"], "worker": ["a:1"]}, "master").is_chief


@pytest.mark.parametrize(
    ("cluster", "address"),
    [
        ({"chief": ["c:1"], "ps": ["p:1"], "worker": ["a:1"]}, "c:1"),
        ({"master": ["m:1"], "worker": ["a:1"]}, "m:1"),
        ({"ps": ["p:1"], "worker": ["a:1", "b:1"]}, "a:1"),  # worker 0 is the chief
        ({"ps": ["p:1"]}, None),
    ],
)
def test_the_chief_a_stopping_server_waits_for(cluster, address):
    assert task(cluster, "ps" if "ps" in cluster else "worker").chief_address == address


MIXES = [
    ({RT.CHIEF: 1, RT.PS: 2, RT.WORKER: 3, RT.EVALUATOR: 1}, "parameter-server"),
    ({RT.PS: 1, RT.WORKER: 2}, "between-graph"),  # no chief to coordinate: the TF1 layout
    ({RT.WORKER: 4}, "multi-worker-mirrored"),
    ({RT.CHIEF: 1, RT.WORKER: 1}, "multi-worker-mirrored"),
    ({RT.WORKER: 1}, "mirrored"),
]


@pytest.mark.parametrize(("replicas", "strategy"), MIXES)
@pytest.mark.parametrize("pod_index_label", [True, False])
def test_operator_tf_config_is_what_the_trainer_understands(replicas, strategy, pod_index_label):
    """The operator's TF_CONFIG, expanded as Kubernetes would, parsed by the trainer."""
    ports = {rt: 2222 for rt in replicas}
    cluster = tfconfig.cluster_spec("mnist", "ml", replicas, ports, "cluster.local")
    for rt, count in replicas.items():
        template = tfconfig.tf_config_template(cluster, rt)
        for i in range(count):
            if not pod_index_label:
                # Without the pod-index label $(TFJOB_TASK_INDEX) is empty: no hostname to
                # fall back on, the trainer says in one line what is missing.
                with pytest.raises(ConfigError) as e:
                    config.parse(template.replace(tfconfig.INDEX_REFERENCE, ""))
                assert str(e.value) == f"TF_CONFIG task.index is empty: {POD_INDEX}"
                continue
            parsed = config.parse(tfconfig.expand(template, i))
            assert (parsed.type, parsed.index) == (rt.task_type, i)
            assert parsed.cluster == cluster and "evaluator" not in parsed.cluster
            assert config.resolve_strategy("auto", parsed) == strategy


def test_wait_for_peers_names_the_hosts_that_do_not_resolve():
    config.wait_for_peers(task({"worker": ["localhost:1", "127.0.0.1:2"]}), timeout=1)
    pending = task({"worker": ["localhost:1", "no-such-host.invalid:2"]})
    with pytest.raises(TimeoutError, match=r"did not resolve within 0s: no-such-host\.invalid$"):
        config.wait_for_peers(pending, timeout=0.3, poll=0.05)


def test_each_task_that_trains_has_a_seed_of_its_own():
    cluster = {"chief": ["c:1"], "worker": ["w:1", "w:2"], "ps": ["p:1"]}
    ranks = [Task(cluster, t, i).rank for t, i in [("chief", 0), ("worker", 0), ("worker", 1)]]
    assert ranks == [0, 1, 2]
    # One order for every strategy that ranks its replicas: the chief first, then the workers.
    assert Task(cluster, "worker", 1).trainers == [("chief", 0), ("worker", 0), ("worker", 1)]
    master = {"master": ["m:1"], "worker": ["w:1"]}
    assert [Task(master, t, 0).rank for t in ("master", "worker")] == [0, 1]
