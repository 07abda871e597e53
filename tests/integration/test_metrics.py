"""The operator's /metrics, scraped as Prometheus would, after jobs succeed, fail, restart and
are deleted: each job counter, the jobs-by-state gauge and the duration histogram."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.core.procs import free_port
from tfjob_testbed.project.operator import stepped_aside

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_job_counters_gauge_and_duration(operator, control_plane, job, kubelet, ns, tmp_path):
    port = free_port()
    with stepped_aside(
        operator, control_plane.kubeconfig, tmp_path / "operator.log", ["--metrics-port", str(port)]
    ):
        # One job restarts a worker once, then succeeds; another fails; a third is deleted.
        job.create(tfjob(name="good", replicas={"Worker": 2}, restart_policy="OnFailure"))
        job.create(tfjob(name="bad", replicas={"Worker": 1}))
        job.create(tfjob(name="gone", replicas={"Worker": 1}))
        for name, n in (("good", 2), ("bad", 1), ("gone", 1)):
            kubelet.run_all(job.wait_pods(name, n))
            job.wait_state(name, "Running")
        kubelet.set("good-worker-1", state="waiting", last_exit=1, restarts=1)
        job.wait_state("good", "Restarting")
        kubelet.set("good-worker-1", restarts=1)
        kubelet.set("good-worker-0", state="terminated", exit_code=0)
        kubelet.set("bad-worker-0", state="terminated", exit_code=2)
        job.wait_state("good", "Succeeded")
        job.wait_state("bad", "Failed")

        def counters():
            s = scrape(port)
            return {
                kind: value(s, f"tfjob_operator_jobs_{kind}_total", job_namespace=ns)
                for kind in ("created", "successful", "failed", "restarted", "deleted")
            }

        assert counters() == dict(created=3, successful=1, failed=1, restarted=1, deleted=0)
        samples = scrape(port)
        for state, n in (("Succeeded", 1), ("Failed", 1), ("Running", 1)):
            assert value(samples, "tfjob_operator_jobs", job_namespace=ns, state=state) == n
        for result in ("Succeeded", "Failed"):
            count = "tfjob_operator_job_duration_seconds_count"
            assert value(samples, count, job_namespace=ns, result=result) == 1
            bucket = "tfjob_operator_job_duration_seconds_bucket"
            assert value(samples, bucket, job_namespace=ns, result=result, le="+Inf") == 1
        assert value(samples, "tfjob_operator_leader") == 0  # no leader election here

        job.kubectl("delete", "tfj", "gone", "-n", ns)
        wait_for(lambda: counters()["deleted"] == 1, 30, "the deletion to be counted")
        wait_for(
            lambda: (
                value(scrape(port), "tfjob_operator_jobs", job_namespace=ns, state="Running") == 0
            ),
            30,
            "the deleted job to leave the gauge",
        )
        assert counters() == dict(created=3, successful=1, failed=1, restarted=1, deleted=1)
