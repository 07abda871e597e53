"""Day two on the real node: an upgrade of the operator to a build that renders pods otherwise
(one more env var) restarts no pod of a running job; the new template reaches a pod at its
next start, and the job ends at its exact target with no failure or restart counted.

Prints one `CHAOS` line, as tests/node/test_stops.py does, for docs/lifecycle.md's table."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.node.helpers import POD_WAIT, STEP, helm_operator, newest_step, pod
from tests.node.test_stops import JOB, TARGET, _pods, finish, report, start
from tfjob_testbed.cluster import Cluster
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.images import podman
from tfjob_testbed.nodes.node import Node

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
def next_operator(node: Node, cluster: Cluster) -> Iterator[str]:
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
    node.import_images([built.archive])
    yield tag.rsplit(":", 1)[1]
    helm_operator(cluster, "image.tag=")


def _env(cluster: Cluster, name: str, namespace: str) -> dict[str, str]:
    spec = pod(cluster, name, namespace)["spec"]
    tf = next(c for c in spec["containers"] if c["name"] == "tensorflow")
    return {e["name"]: e.get("value", "") for e in tf.get("env") or []}


def test_an_operator_upgrade_restarts_no_pod(
    cluster: Cluster, namespace: str, next_operator: str
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
