"""`tfjob get | delete | submit | logs | tensorboard` against the real API server, run as a
user runs them: a process with $KUBECONFIG. Their errors are one line and a non-zero exit.
(Logs and TensorBoard of running pods need a kubelet: tests/node covers them.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.core.paths import ROOT
from tfjob_testbed.project.tfjob_cli import cli_env, tfjob_cli

pytestmark = pytest.mark.integration


def manifest(tmp_path: Path, body: dict, name: str = "job.yaml") -> Path:
    body["metadata"].pop("uid", None)
    body["metadata"].pop("namespace", None)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(body))
    return path


def one_line_error(proc: subprocess.CompletedProcess, code: int, *words: str) -> str:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tfjob: "), proc.stderr
    assert all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.fixture
def kubeconfig(control_plane) -> Path:
    return control_plane.kubeconfig


def test_get_and_delete(kubeconfig, job, kubelet, ns):
    job.create(tfjob(name="first", replicas={"Worker": 2}))
    job.create(tfjob(name="second", replicas={"PS": 1, "Worker": 1}))
    kubelet.run_all(job.wait_pods("first", 2))
    job.wait_state("first", "Running")
    job.wait_state("second", "Created")

    proc = tfjob_cli(kubeconfig, "get", "-n", ns)
    assert proc.returncode == 0, proc.stderr
    header, *rows = proc.stdout.splitlines()
    assert header.split() == ["NAME", "STATE", "REPLICAS", "RESTARTS", "AGE"]
    assert [r.split()[:4] for r in rows] == [
        ["first", "Running", "2/2", "0"],
        ["second", "Created", "0/2", "0"],
    ]
    one = tfjob_cli(kubeconfig, "get", "second", "--namespace", ns).stdout.splitlines()
    assert len(one) == 2 and one[1].startswith("second")
    every = tfjob_cli(kubeconfig, "get", "-A").stdout.splitlines()
    assert every[0].split()[0] == "NAMESPACE"
    assert any(r.split()[:2] == [ns, "first"] for r in every[1:])

    one_line_error(tfjob_cli(kubeconfig, "get", "nope", "-n", ns), 1, f"TFJob {ns}/nope not found")
    done = tfjob_cli(kubeconfig, "delete", "first", "-n", ns)
    assert done.returncode == 0 and "tfjobs.tfjob.dev/first deleted" in done.stdout
    wait_for(lambda: job.gone(lambda: job.get("first")), 30, "first deleted")
    one_line_error(tfjob_cli(kubeconfig, "delete", "first", "-n", ns), 1, "not found")
    assert "No TFJobs in namespace" in tfjob_cli(kubeconfig, "get", "-n", "kube-public").stdout


def test_submit_checks_first_and_refuses_a_second_copy(kubeconfig, job, ns, tmp_path):
    path = manifest(tmp_path, tfjob(name="sub", replicas={"Worker": 1}))
    proc = tfjob_cli(kubeconfig, "submit", str(path), "-n", ns)
    assert proc.returncode == 0, proc.stderr
    assert f"tfjobs.tfjob.dev/sub created in namespace {ns}" in proc.stdout
    assert job.get("sub")["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] == 1
    one_line_error(tfjob_cli(kubeconfig, "submit", str(path), "-n", ns), 1, "already exists")

    bad = tfjob(name="bad")
    bad["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 0
    bad["spec"]["tfReplicaSpecs"].pop("PS")
    error = one_line_error(
        tfjob_cli(kubeconfig, "submit", str(manifest(tmp_path, bad, "bad.yaml")), "-n", ns),
        2,
        "invalid TFJob",
    )
    assert "no workers" in error
    assert job.gone(lambda: job.get("bad")), "an invalid job is not sent"
    other = tmp_path / "pod.yaml"
    other.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    one_line_error(tfjob_cli(kubeconfig, "submit", str(other)), 2, "is not a TFJob")
    one_line_error(tfjob_cli(kubeconfig, "submit", str(tmp_path / "none.yaml")), 2, "cannot read")


def test_kubeflow_jobs_by_their_group(kubeconfig, kf_job, ns, tmp_path):
    """A Kubeflow manifest goes to Kubeflow's group by its apiVersion; get and delete take the
    group the operator serves (--api-group, or TFJOB_API_GROUP)."""
    body = tfjob(name="kf", replicas={"Worker": 1})
    body["apiVersion"] = "kubeflow.org/v1"
    proc = tfjob_cli(kubeconfig, "submit", str(manifest(tmp_path, body)), "-n", ns)
    assert f"tfjobs.kubeflow.org/kf created in namespace {ns}" in proc.stdout, proc.stderr
    kf_job.wait_state("kf", "Created")
    kf = ("--api-group", "kubeflow.org")
    rows = tfjob_cli(kubeconfig, "get", "-n", ns, *kf).stdout.splitlines()
    assert [r.split()[:2] for r in rows[1:]] == [["kf", "Created"]]
    assert "No TFJobs" in tfjob_cli(kubeconfig, "get", "-n", ns).stdout, "tfjob.dev by default"
    done = tfjob_cli(kubeconfig, "delete", "kf", "-n", ns, *kf)
    assert "tfjobs.kubeflow.org/kf deleted" in done.stdout, done.stderr


@pytest.mark.smoke
def test_scale_patches_the_replicas_in_either_group(kubeconfig, job, kf_job, ns):
    """`tfjob scale`: the job's Worker (and PS) replicas; the StatefulSets follow. What it cannot
    scale is one line. (A running job's restart: test_resize.py.)"""
    one_line_error(
        tfjob_cli(kubeconfig, "scale", "nope", "--workers", "2", "-n", ns), 1, "not found"
    )
    job.create(tfjob(name="chiefly", replicas={"Chief": 1}))
    one_line_error(
        tfjob_cli(kubeconfig, "scale", "chiefly", "--workers", "2", "-n", ns),
        2,
        f"TFJob {ns}/chiefly has no Worker replicas to scale",
    )
    body = tfjob(name="kf", replicas={"PS": 1, "Worker": 1})
    body["apiVersion"] = "kubeflow.org/v1"
    kf_job.create(body)
    kf = ("--api-group", "kubeflow.org")
    done = tfjob_cli(kubeconfig, "scale", "kf", "--workers", "3", "--ps", "2", "-n", ns, *kf)
    assert "tfjobs.kubeflow.org/kf scaled: Worker 1 → 3, PS 1 → 2" in done.stdout, done.stderr
    assert kf_job.wait_replicas("kf", {"kf-ps": 2, "kf-worker": 3})
    # Without --api-group: tfjob.dev, which has no such job.
    one_line_error(tfjob_cli(kubeconfig, "scale", "kf", "--workers", "2", "-n", ns), 1, "not found")


@pytest.mark.parametrize(("exit_code", "want"), [(0, 0), (3, 1)])
def test_submit_follow_prints_transitions_and_the_summary_and_exits_with_the_result(
    kubeconfig, job, kubelet, ns, tmp_path, exit_code, want
):
    path = manifest(tmp_path, tfjob(name="follow", replicas={"Worker": 2}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfjob_operator.cli", "submit", str(path), "-n", ns, "--follow"],
        env=cli_env(kubeconfig),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        kubelet.run_all(job.wait_pods("follow", 2))
        job.wait_state("follow", "Running")
        kubelet.set("follow-worker-0", state="terminated", exit_code=exit_code)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == want, (out, err)
    assert f"[tfjob] TFJobCreated: TFJob {ns}/follow is created." in out
    assert f"[tfjob] TFJobRunning: TFJob {ns}/follow is running." in out
    summary = out[out.rindex("state  ") :]
    if want == 0:
        assert "state  Succeeded: " in summary
    else:
        assert "state  Failed: " in summary and "exited with code 3" in summary


def test_logs_and_tensorboard_say_what_is_missing(kubeconfig, job, ns):
    job.create(tfjob(name="quiet", replicas={"Worker": 1}))
    job.wait_state("quiet", "Created")
    one_line_error(tfjob_cli(kubeconfig, "logs", "nope", "-n", ns), 1, "not found")
    wait_for(lambda: job.pods("quiet"), 30, "the pod")
    one_line_error(
        tfjob_cli(kubeconfig, "logs", "quiet", "--replica", "worker-7", "-n", ns),
        1,
        "no running replica worker-7",
        "worker-0",
    )
    one_line_error(tfjob_cli(kubeconfig, "tensorboard", "quiet", "-n", ns), 1, "has no TensorBoard")


def test_no_cluster_is_one_line(tmp_path, kubeconfig):
    one_line_error(tfjob_cli(tmp_path / "absent", "get"), 1, "no cluster", "KUBECONFIG")
    dead = json.loads(kubeconfig.read_text())
    dead["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    (tmp_path / "dead").write_text(json.dumps(dead))
    started = time.monotonic()
    one_line_error(
        tfjob_cli(tmp_path / "dead", "get"), 1, "cannot reach the cluster at https://127.0.0.1:1"
    )
    assert time.monotonic() - started < 30
