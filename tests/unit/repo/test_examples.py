"""Every example TFJob is valid for the operator, and every pod of it gets a configuration the
trainer accepts: the two halves of the product agree on each example."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tfjob_operator.api.spec import parse_spec
from tfjob_operator.rules import naming, tfconfig
from tfjob_operator.rules.children import JobRef, cluster_for, desired_children
from tfjob_trainer import config, options

ROOT = Path(__file__).resolve().parents[3]
# ... and a user's project, with functions of its own.
EXAMPLES = [
    *sorted((ROOT / "manifests" / "examples").glob("*.yaml")),
    ROOT / "examples" / "tabular" / "tfjob.yaml",
]


def test_the_examples_exist():
    assert [p.stem for p in EXAMPLES] == [
        "mnist-between-graph",
        "mnist-multi-gpu",
        "mnist-ps",
        "mnist-sync",
        "mnist-tensorboard",
        "tfjob",
    ]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.parent.name + "/" + p.stem)
def test_example_is_valid_and_every_pod_can_train(path):
    body = yaml.safe_load(path.read_text())
    assert body["apiVersion"] == "tfjob.dev/v1" and body["kind"] == "TFJob"
    spec = parse_spec(body["spec"])
    name = body["metadata"]["name"]
    assert naming.check_job_name(name, spec.replicas()) == []
    assert spec.checkpoint is not None, "every example keeps its checkpoints on a volume"
    job = JobRef(name, "default", "uid")
    children = desired_children(job, spec, "cluster.local")
    assert [c["kind"] for c in children].count("StatefulSet") == len(spec.replicas())

    cluster = cluster_for(job, spec, "cluster.local")
    for rt, rs in spec.replicas().items():
        container = rs.template["spec"]["containers"][0]
        args = container.get("args", [])
        opts = options.parse([*args, "--checkpoint-dir", "/checkpoints"])
        for i in range(rs.replicas):
            raw = tfconfig.tf_config(cluster, rt, i)
            task = config.parse(raw)
            strategy = config.resolve_strategy(opts.strategy, task)
            assert strategy == opts.strategy, (rt, i, strategy)
