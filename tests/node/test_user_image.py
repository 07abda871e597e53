"""A user's own model and data on the cluster, as the project tells users to ship them: an image
built FROM the trainer image with their package and data (examples/tabular/Dockerfile), and a
TFJob that names their functions (examples/tabular/tfjob.yaml), applied with kubectl."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
import yaml

from tests.node.cluster_reads import (
    assert_scaled_down,
    claim_files,
    follow,
    leader,
    newest_step,
    wait_ended,
)
from tfjob_operator.rules import naming
from tfjob_protocol.result import parse_last
from tfjob_testbed.images import example as example_image
from tfjob_testbed.operator_cluster import OperatorCluster

pytestmark = pytest.mark.node

MANIFEST = Path(__file__).resolve().parents[2] / "examples" / "tabular" / "tfjob.yaml"
STEPS = 300
# The target's variance is about 1 (what a model that learned nothing scores) and its noise
# floor 0.01; 300 steps reach about 0.1 on the training batches and 0.05 on the eval files.
LOSS_BOUND = 0.3


@pytest.fixture(scope="module")
def example_on_node(cluster: OperatorCluster) -> str:
    """The example image, built on the trainer image of this session and imported into the
    node's containerd, as the project's own images are; returns its tag."""
    if cluster.node is None:
        pytest.skip("imports the example image into the real node's containerd (kind: load it)")
    started = time.monotonic()
    image = example_image.build()
    cluster.node.import_images([image.archive])
    print(f"{image.name}: built and imported in {time.monotonic() - started:.1f} s")
    return image.name


def test_user_model_trains_checkpoints_and_exports(
    cluster: OperatorCluster, namespace: str, example_on_node: str
) -> None:
    text = MANIFEST.read_text()
    steps = re.findall(r"--steps=\d+", text)
    assert steps, "the example sets no --steps"
    job = yaml.safe_load(text)
    images = {
        c["image"]
        for rs in job["spec"]["tfReplicaSpecs"].values()
        for c in rs["template"]["spec"]["containers"]
    }
    assert [f"docker.io/{i}" for i in images] == [example_on_node], images
    # The chief's and the evaluator's step count lowered together, as docs/install.md's
    # override does.
    cluster.apply(re.sub(r"--steps=\d+", f"--steps={STEPS}", text), namespace)
    name = job["metadata"]["name"]
    log = follow(cluster, leader(job), namespace).wait()
    assert newest_step(log) == STEPS, log[-3000:]
    result = parse_last(log)
    assert result is not None, log[-3000:]
    assert result["steps"] == STEPS, result
    assert result["loss"] < LOSS_BOUND, result
    assert set(result["evaluation"]) == {"loss", "mae"}, result
    assert result["evaluation"]["loss"] < LOSS_BOUND, result
    print(f"loss {result['loss']:.3f}, on the eval files {result['evaluation']}")
    wait_ended(cluster, name, namespace)
    assert_scaled_down(cluster, name, namespace)
    files = claim_files(cluster, naming.checkpoint_claim_name(name), namespace)
    assert "checkpoint" in files, sorted(files)
    assert f"ckpt-{STEPS}.index" in files, sorted(files)
    assert files.get("export/model.keras", (0, 0))[1] > 0, sorted(files)
    assert result["export"].endswith("/export/model.keras"), result
