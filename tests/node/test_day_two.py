"""Day two on the real node: an upgrade of the operator to a build that renders pods otherwise
(one more env var) restarts no pod of a running job, the new template reaching a pod at its
next start; and a task held inside TensorFlow's strategy setup, where no Python runs, leaves
within seconds of its pod's deletion, not at its grace period's end.

Each prints one `CHAOS` line, as tests/node/test_stops_on_request.py does, for docs/lifecycle.md."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.node.cluster_reads import (
    POD_WAIT,
    STEP,
    fast_job,
    follow,
    helm_operator,
    job_pods,
    newest_step,
    pod,
)
from tests.node.test_stops_on_request import JOB, TARGET, _pods, finish, report, start
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.images import podman
from tfjob_testbed.nodes.node import Node
from tfjob_testbed.operator_cluster import OperatorCluster

pytestmark = pytest.mark.node
WORKER = f"{JOB}-worker-1"
NEXT_ENV = "TFJOB_NEXT_OPERATOR"
SITE = "/opt/venv/lib/python3.11/site-packages"
# The next operator version, as far as pods can tell: every template it renders carries one
# more env var (a new image would change it the same way).
NEXT_OPERATOR = f'''"""The operator's next build, for a test: one more env var in each pod."""
from tfjob_operator.rules import children

_rendered = children._operator_env


def _operator_env(*args, **kwargs):
    return [*_rendered(*args, **kwargs), {{"name": "{NEXT_ENV}", "value": "1"}}]


children._operator_env = _operator_env
'''


@pytest.fixture
def next_operator(node: Node, cluster: OperatorCluster) -> Iterator[str]:
    """The operator's image tag of a build that renders one more env var, imported into the
    node; the release goes back to its own image afterwards."""
    current = podman.image_tags()["operator"][0]
    tag = f"{current}-next"
    built = podman.derived_image(
        current,
        tag,
        {f"{SITE}/tfjob_next_operator.py": NEXT_OPERATOR,
         f"{SITE}/tfjob_next_operator.pth": "import tfjob_next_operator\n"},
    )  # fmt: skip
    # A second node made later imports what this one did: the archives stay where they were.
    assert all(a.exists() for a in node.archives), node.archives
    node.import_images([built.archive])
    yield tag.rsplit(":", 1)[1]
    helm_operator(cluster, "image.tag=")


def _env(cluster: OperatorCluster, name: str, namespace: str) -> dict[str, str]:
    spec = pod(cluster, name, namespace)["spec"]
    tf = next(c for c in spec["containers"] if c["name"] == "tensorflow")
    return {e["name"]: e.get("value", "") for e in tf.get("env") or []}


def test_an_operator_upgrade_restarts_no_pod(
    cluster: OperatorCluster, namespace: str, next_operator: str
) -> None:
    run = start(cluster, namespace, TARGET)
    run.log.until(STEP.search, "training")
    before = _pods(cluster, namespace)
    assert WORKER in before and NEXT_ENV not in _env(cluster, WORKER, namespace)

    upgraded = time.monotonic()
    helm_operator(cluster, f"image.tag={next_operator}")
    # The new operator has applied the new template to each StatefulSet.
    wait_for(
        lambda: all(
            NEXT_ENV in str(s["spec"]["template"])
            for s in cluster.get("statefulsets", "-n", namespace)["items"]
        ),
        POD_WAIT,
        "the new operator's templates applied",
    )
    reached = newest_step(run.log.text)
    run.log.until(lambda t: newest_step(t) > reached + 100, "training on")
    assert _pods(cluster, namespace) == before
    report("helm upgrade to an operator that renders pods otherwise", 0, 0,
           time.monotonic() - upgraded)  # fmt: skip

    # A pod made after the upgrade is made from the new template.
    cluster.kubectl("delete", "pod", WORKER, "-n", namespace, "--wait=false")
    wait_for(
        lambda: _pods(cluster, namespace).get(WORKER, (before[WORKER][0],))[0] != before[WORKER][0],
        POD_WAIT,
        "the worker made again",
    )
    assert _env(cluster, WORKER, namespace)[NEXT_ENV] == "1"
    now = _pods(cluster, namespace)
    assert {k: v for k, v in now.items() if k != WORKER} == {
        k: v for k, v in before.items() if k != WORKER
    }
    finish(run, TARGET)


# A peer that answers TCP and never speaks: TensorFlow's setup waits on it inside C++. It
# leaves on SIGTERM at once.
SILENT_PEER = (
    "import signal, socket, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "server = socket.create_server(('', 2222), backlog=64)\n"
    "time.sleep(86400)\n"
)
HELD = "held"
HELD_CHIEF = f"{HELD}-chief-0"
HELD_GRACE = 120  # what a held task kept its pod for, before


@pytest.mark.smoke
def test_a_task_held_in_its_strategys_setup_leaves_within_seconds(
    cluster: OperatorCluster, namespace: str
) -> None:
    job = fast_job(HELD, "mnist-sync")
    specs = job["spec"]["tfReplicaSpecs"]
    chief = specs["Worker"]
    specs["Chief"] = {**chief, "replicas": 1}
    worker = chief["template"]["spec"]["containers"][0]
    specs["Worker"] = {
        "replicas": 1,
        "restartPolicy": "OnFailure",
        "template": {"spec": {"containers": [
            {**worker, "command": ["python", "-c", SILENT_PEER], "args": []}
        ]}},
    }  # fmt: skip
    job["spec"]["runPolicy"]["terminationGracePeriodSeconds"] = HELD_GRACE
    cluster.apply(job, namespace)
    log = follow(cluster, HELD_CHIEF, namespace)
    log.until(lambda t: "start-up:" in t, "the chief past its start")
    # Inside the setup once its own gRPC server serves: and held there by the silent peer.
    wait_for(lambda: _serves(cluster, namespace), POD_WAIT, "the chief's server up")
    uid = pod(cluster, HELD_CHIEF, namespace)["metadata"]["uid"]

    deleted = time.monotonic()
    cluster.kubectl("delete", "pod", HELD_CHIEF, "-n", namespace, "--wait=false")
    ended = log.wait(POD_WAIT)
    wait_for(lambda: not _exists(cluster, namespace, uid), 30, "the chief's pod gone", interval=0.1)
    gone = time.monotonic() - deleted
    assert "did not leave within" in ended, ended[-3000:]
    assert gone < 5, gone
    status = cluster.tfjob_status(HELD, namespace)
    assert not status.get("failure") and status.get("restarts", 0) == 0, status
    report("the chief deleted while held in its strategy's setup", 0, 0, gone)


def _serves(cluster: OperatorCluster, namespace: str) -> bool:
    probe = "import socket; socket.create_connection(('127.0.0.1', 2222), timeout=1)"
    done = cluster.kubectl(
        "exec", HELD_CHIEF, "-n", namespace, "--", "python", "-c", probe, check=False
    )
    return done.returncode == 0


def _exists(cluster: OperatorCluster, namespace: str, uid: str) -> bool:
    return any(p["metadata"]["uid"] == uid for p in job_pods(cluster, namespace, HELD))
