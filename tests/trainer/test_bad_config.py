"""A configuration that cannot work ends with exit code 2 and one line, before TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tfjob_testbed.core.paths import ROOT

CLUSTER = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}


def run(
    tf_config: str | None, *args: str, checkpoint_dir: str | None = "/tmp/unused"
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CONFIG", "TFJOB_CHECKPOINT_DIR")}
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    if checkpoint_dir is not None:
        args = ("--checkpoint-dir", checkpoint_dir, *args)
    return subprocess.run(
        [sys.executable, "-m", "tfjob_trainer", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    ("tf_config", "args", "says"),
    [
        (None, ["--strategy", "parameter-server"], "TF_CONFIG is not set"),
        ("{not json", [], "TF_CONFIG is not valid JSON"),
        (
            json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 5}}),
            [],
            "task.index 5 is out of range: the cluster has 1 worker task(s)",
        ),
        (
            json.dumps(
                {
                    "cluster": {**CLUSTER, "evaluator": ["127.0.0.1:4"]},
                    "task": {"type": "chief", "index": 0},
                }
            ),
            ["--strategy", "parameter-server"],
            "must not list the evaluator",
        ),
        (
            # What Kubernetes makes of `"index": $(TFJOB_TASK_INDEX)` without the pod-index label.
            '{"cluster": {"worker": ["127.0.0.1:2"]}, "task": {"type": "worker", "index": }}',
            [],
            "task.index is empty: Kubernetes fills it from the pod's "
            "apps.kubernetes.io/pod-index label, which StatefulSet pods carry on Kubernetes 1.28",
        ),
        (
            json.dumps({"cluster": CLUSTER, "task": {"type": "launcher", "index": 0}}),
            [],
            "task.type 'launcher' is not one of",
        ),
        (
            json.dumps(
                {"cluster": {"worker": CLUSTER["worker"]}, "task": {"type": "worker", "index": 0}}
            ),
            ["--strategy", "parameter-server"],
            "the cluster needs ps and worker tasks",
        ),
        (
            json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 0}}),
            ["--strategy", "multi-worker-mirrored"],
            "the cluster has ps tasks",
        ),
        (
            json.dumps({"cluster": CLUSTER, "task": {"type": "worker", "index": 0}}),
            ["--steps", "0"],
            "--steps must be at least 1",
        ),
    ],
)
def test_exit_2_with_one_line(tf_config, args, says):
    proc = run(tf_config, *args)
    assert proc.returncode == 2
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tfjob-trainer: configuration error: ") and says in lines[0]


def test_the_evaluator_needs_the_checkpoint_directory():
    """Other roles train without one (tests/trainer/test_no_checkpoint_dir.py); the evaluator
    would have nothing to follow, so it says so at once instead of waiting for --eval-timeout."""
    tf_config = json.dumps({"cluster": CLUSTER, "task": {"type": "evaluator", "index": 0}})
    proc = run(tf_config, checkpoint_dir=None)
    assert proc.returncode == 2
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert lines == [
        "tfjob-trainer: configuration error: the evaluator follows the training's checkpoints: "
        "give it the chief's --checkpoint-dir (or TFJOB_CHECKPOINT_DIR; in a TFJob, add a "
        "checkpoint: section)"
    ]
