"""Looking at a job on the cluster as a user does: `tfjob submit --follow` and the job's own
TensorBoard (spec.tensorboard), before and after it has finished."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from tests.node.cluster_reads import (
    POD_WAIT,
    TRAIN_WAIT,
    assert_scaled_down,
    container,
    fast_job,
    pod,
    wait_ended,
)
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.core.paths import ROOT
from tfjob_testbed.core.procs import free_port
from tfjob_testbed.operator_cluster import OperatorCluster
from tfjob_testbed.project.tfjob_cli import cli_env, tfjob_cli

pytestmark = pytest.mark.node


def write(tmp_path: Path, job: dict) -> Path:
    path = tmp_path / f"{job['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def test_submit_follow_prints_every_replica_and_the_summary(
    cluster: OperatorCluster, namespace: str, tmp_path: Path
) -> None:
    path = write(tmp_path, fast_job("follow", "mnist-ps"))
    proc = tfjob_cli(
        cluster.kubeconfig, "submit", str(path), "-n", namespace, "--follow", timeout=TRAIN_WAIT
    )
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr
    for replica in ("chief-0", "ps-0", "worker-0", "worker-1"):
        assert f"[{replica}] " in out, replica
    assert re.search(r"^\[chief-0\] step 300, loss = ", out, re.MULTILINE), out[-3000:]
    assert f"[tfjob] TFJobSucceeded: TFJob {namespace}/follow successfully completed" in out
    summary = out[out.rindex("state  ") :]
    assert "state  Succeeded: " in summary and "steps  300" in summary
    assert re.search(r"test accuracy  0\.\d+", summary), summary


def test_submit_follow_of_a_failing_job_exits_non_zero_with_the_reason(
    cluster: OperatorCluster, namespace: str, tmp_path: Path
) -> None:
    job = fast_job("broken", "mnist-sync", "--no-such-flag")
    for rs in job["spec"]["tfReplicaSpecs"].values():
        rs["restartPolicy"] = "Never"
    proc = tfjob_cli(
        cluster.kubeconfig, "submit", str(write(tmp_path, job)), "-n", namespace, "--follow",
        timeout=POD_WAIT,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    assert "unrecognized arguments: --no-such-flag" in proc.stdout  # the replica's own words
    summary = proc.stdout[proc.stdout.rindex("state  ") :]
    assert "state  Failed: " in summary and "exited with code 2" in summary


@contextmanager
def forwarded(cluster: OperatorCluster, namespace: str, target: str) -> Iterator[str]:
    """`kubectl port-forward` to `target` port 6006; yields the local base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [str(cluster.tools.kubectl), "--kubeconfig", str(cluster.kubeconfig), "port-forward",
         "-n", namespace, target, f"{port}:6006"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def get_json(url: str):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.loads(r.read())
    except OSError:
        return None


def board_has_everything(base: str) -> dict | None:
    """TensorBoard's own HTTP API: both runs, and the train run's scalars, histograms and
    images; None until it has read them all."""
    runs = get_json(f"{base}/data/runs")
    scalars = get_json(f"{base}/data/plugin/scalars/tags") or {}
    histograms = get_json(f"{base}/data/plugin/histograms/tags") or {}
    images = get_json(f"{base}/data/plugin/images/tags") or {}
    seen = {
        "runs": sorted(runs or []),
        "train scalars": sorted(scalars.get("train", {})),
        "eval scalars": sorted(scalars.get("eval", {})),
        "histograms": sorted(histograms.get("train", {})),
        "images": sorted(images.get("train", {})),
    }
    ready = (
        {"train", "eval"} <= set(seen["runs"])
        and {"loss", "accuracy"} <= set(seen["train scalars"])
        and {"loss", "accuracy"} <= set(seen["eval scalars"])
        and any(t.endswith("/kernel") for t in seen["histograms"])
        and "input" in seen["images"]
    )
    return seen if ready else None


def test_tensorboard_serves_the_job_during_and_after_it(
    cluster: OperatorCluster, namespace: str, tmp_path: Path
) -> None:
    job = fast_job("board", "mnist-tensorboard", "--histogram-every=100")
    cluster.apply(job, namespace)
    status = wait_for(
        lambda: cluster.tfjob_status("board", namespace).get("tensorboard"),
        POD_WAIT,
        "status.tensorboard",
    )
    assert status["portForward"] == (
        f"kubectl port-forward -n {namespace} svc/board-tensorboard 6006:6006"
    )
    # `tfjob logs -f` of one replica while it trains: its whole run, prefixed.
    wait_for(
        lambda: "running" in container(pod(cluster, "board-chief-0", namespace)).get("state", {}),
        POD_WAIT,
        "the chief running",
    )
    logs = tfjob_cli(
        cluster.kubeconfig, "logs", "board", "--replica", "chief-0", "-f", "-n", namespace,
        timeout=TRAIN_WAIT,
    )  # fmt: skip
    assert logs.returncode == 0, logs.stderr
    lines = logs.stdout.splitlines()
    assert lines and all(line.startswith("[chief-0] ") for line in lines), lines[:5]
    assert any(line.startswith("[chief-0] TFJOB_RESULT ") for line in lines), lines[-5:]
    wait_ended(cluster, "board", namespace)
    assert_scaled_down(cluster, "board", namespace)  # the training pods are gone...
    with forwarded(cluster, namespace, "svc/board-tensorboard") as base:  # ...TensorBoard is not
        seen = wait_for(lambda: board_has_everything(base), POD_WAIT, "TensorBoard's data")

        def steps() -> list[int]:
            # [wall time, step, value] per report; TensorBoard reloads the files every 5 s.
            loss = get_json(f"{base}/data/plugin/scalars/scalars?run=train&tag=loss") or []
            return [step for _, step, _ in loss]

        reported = wait_for(
            lambda: (s := steps()) and s[-1] >= 200 and s, 60, "the last reports in TensorBoard"
        )
        assert reported == sorted(reported) and len(reported) >= 3, reported
    print("TensorBoard tags:", seen)

    # `tfjob tensorboard` reaches the same, through the API server's port-forward.
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfjob_operator.cli", "tensorboard", "board", "-n", namespace,
         "--port", "0"],
        env=cli_env(cluster.kubeconfig), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert url, line
        runs = wait_for(lambda: get_json(url.group(0) + "data/runs"), 60, "runs via tfjob")
        assert {"train", "eval"} <= set(runs)
    finally:
        proc.terminate()
        proc.wait(10)
