"""Two operator replicas with leader election, on the real API server: one reconciles, the
other takes over within the lease duration, and a leader whose Lease ran out writes nothing.

Who wrote what is read from the API server's audit log: every request of a replica carries
its identity in the user agent.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import kubernetes
import pytest

from tests.integration.user_view import CHILD_WAIT
from tfjob_operator.controller.handlers import LOST_LEASE_EXIT
from tfjob_operator.rules import status as st
from tfjob_testbed.core.jobs import tfjob
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.project.operator import OperatorProcess

pytestmark = pytest.mark.integration

LEASE = "tfjob-operator-leader"
DURATION, DEADLINE, RETRY = 4.0, 3.0, 0.5
WRITES = {"create", "update", "patch", "delete"}


class Replicas:
    """Two operator processes named op-a and op-b, electing a leader in `namespace`."""

    def __init__(self, kubeconfig: Path, namespace: str, logs: Path) -> None:
        self.namespace = namespace
        args = [
            "--leader-elect",
            f"--leader-elect-resource-namespace={namespace}",
            f"--leader-elect-lease-duration={DURATION}",
            f"--leader-elect-renew-deadline={DEADLINE}",
            f"--leader-elect-retry-period={RETRY}",
        ]
        self.procs = {}
        for name in ("op-a", "op-b"):
            proc = OperatorProcess(kubeconfig, logs / f"{name}.log", args)
            proc.env["POD_NAME"] = name
            self.procs[name] = proc

    def lease(self, coordination) -> dict:
        try:
            return coordination.read_namespaced_lease(LEASE, self.namespace).spec.to_dict()
        except kubernetes.client.ApiException as e:
            if e.status == 404:
                return {}
            raise

    def holder(self, coordination) -> str:
        return self.lease(coordination).get("holder_identity") or ""


@pytest.fixture
def coordination(api) -> kubernetes.client.CoordinationV1Api:
    return kubernetes.client.CoordinationV1Api(api)


@pytest.fixture
def replicas(operator, control_plane, ns, tmp_path, coordination) -> Iterator[Replicas]:
    """op-a starts first and leads; op-b stands by. The suite's own operator steps aside."""
    operator.stop()
    pair = Replicas(control_plane.kubeconfig, ns, tmp_path)
    try:
        pair.procs["op-a"].start()
        wait_for(lambda: pair.holder(coordination).startswith("op-a_"), 30, "op-a to lead")
        pair.procs["op-b"].start()
        yield pair
    finally:
        for proc in pair.procs.values():
            with contextlib.suppress(ProcessLookupError):
                proc.proc.send_signal(signal.SIGCONT)
            proc.stop()
        print("\n".join(f"{n}: {p.log}" for n, p in pair.procs.items()))
        operator.start()


def children_uids(job, name) -> dict[str, str]:
    objs = {**job.statefulsets(name), **job.services(name)}
    return {f"{type(o).__name__}/{n}": o.metadata.uid for n, o in objs.items()}


def start_job(job, kubelet, name="mnist") -> dict[str, str]:
    """A PS + 2 workers job, Running with every pod up; returns its children's uids."""
    job.create(tfjob(name=name, replicas={"PS": 1, "Worker": 2}))
    pods = job.wait_pods(name, 3)
    kubelet.run_all(pods)
    job.wait_state(name, "Running")
    return children_uids(job, name)


def history(status) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in status["conditions"]]


FIRST_PASS = re.compile(r"first pass: all [1-9]\d* TFJobs known at the start looked at")
UNDISTURBED = [
    ("Created", "True", "TFJobCreated"),
    ("Running", "False", "TFJobRunning"),
    ("Succeeded", "True", "TFJobSucceeded"),
]


def writes_by(control_plane, identity: str) -> list[dict]:
    """The replica's writes: not its dry runs, which store nothing (every replica asks, at
    start, whether container restart rules are kept)."""
    agent = f"tfjob-operator/{identity}"
    return [
        e
        for e in control_plane.audit()
        if e.get("userAgent", "").startswith(agent)
        and e.get("verb") in WRITES
        and "dryRun=" not in e.get("requestURI", "")
    ]


@pytest.mark.smoke
def test_killed_leader_hands_over_within_the_lease_duration(
    replicas, job, kubelet, coordination, control_plane
):
    before = start_job(job, kubelet)
    old = replicas.holder(coordination)
    assert writes_by(control_plane, old), "the leader's writes are in the audit log"
    assert writes_by(control_plane, "op-b_") == [], "the standby reconciles nothing"
    replicas.procs["op-a"].kill()
    killed = time.monotonic()
    new = wait_for(
        lambda: (h := replicas.holder(coordination)).startswith("op-b_") and h,
        DURATION + 5,
        "op-b to take the Lease",
    )
    handover = time.monotonic() - killed
    assert handover <= DURATION + 1.0, f"took {handover:.1f}s for a {DURATION}s Lease"
    assert replicas.lease(coordination)["lease_transitions"] == 1
    # The new leader looks at every job it knows at once, not only when one of them changes.
    wait_for(
        lambda: FIRST_PASS.search(replicas.procs["op-b"].log.read_text()),
        CHILD_WAIT,
        "the new leader's first pass over the jobs it knows",
    )

    kubelet.set("mnist-worker-0", state="terminated", exit_code=0)
    status = job.wait_state("mnist", "Succeeded", CHILD_WAIT)
    assert history(status) == UNDISTURBED
    assert children_uids(job, "mnist") == before, "no child was replaced or duplicated"
    job.wait_event("mnist", "TFJobSucceeded")  # posted in the background, after the status
    assert [e[1] for e in job.events("mnist")].count("TFJobSucceeded") == 1
    assert writes_by(control_plane, new), "the new leader wrote the end of the job"
    assert old != new


def test_a_paused_leader_writes_nothing_once_its_lease_is_gone(
    replicas, job, kubelet, coordination, control_plane
):
    before = start_job(job, kubelet)
    old = replicas.holder(coordination)
    a = replicas.procs["op-a"]
    assert writes_by(control_plane, old), "the leader's writes are in the audit log"
    a.proc.send_signal(signal.SIGSTOP)  # a long GC pause, a frozen VM: the process lives on
    new = wait_for(
        lambda: (h := replicas.holder(coordination)).startswith("op-b_") and h,
        DURATION + 5,
        "op-b to take the Lease from the paused op-a",
    )
    taken = replicas.lease(coordination)["acquire_time"]
    # While op-a sleeps, the job moves on and a new one comes: op-a has news to act on when it
    # wakes, and would write what op-b has written already.
    kubelet.set("mnist-worker-1", state="terminated", exit_code=1)
    job.wait_state("mnist", "Failed")
    job.create(tfjob(name="late", replicas={"Worker": 1}))
    job.wait_pods("late", 1)
    a.proc.send_signal(signal.SIGCONT)
    try:
        code = a.proc.wait(DURATION * 3)
    except subprocess.TimeoutExpired:
        pytest.fail(f"op-a kept running after losing its Lease:\n{a.tail()}")
    assert code == LOST_LEASE_EXIT
    assert "lost Lease" in a.log.read_text()

    late = [
        e
        for e in writes_by(control_plane, old)
        if datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00")) >= taken
    ]
    assert late == [], [(e["verb"], e["objectRef"]) for e in late]
    assert writes_by(control_plane, new), "op-b wrote the failure"
    status = job.status("mnist")
    assert status["failure"]["pod"] == "mnist-worker-1"
    assert children_uids(job, "mnist") == before
    assert st.state(status) == "Failed"
