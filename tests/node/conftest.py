"""One cluster for every test under tests/node: the real node of `make cluster` (images built from
the Dockerfile, the operator installed by its chart), or, with TFJOB_E2E_KUBECONFIG set, a
cluster brought up elsewhere with the chart installed (tests/e2e/kind.sh). Tests that inject
faults on the host take the `node` fixture and skip on other clusters; tests that need two
nodes take `second_node` (a second real node joining the session's bed)."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.node.addons import Addons
from tfjob_testbed.nodes import node as node_mod
from tfjob_testbed.nodes.second_node import SecondNode
from tfjob_testbed.operator_cluster import OperatorCluster, start

pytestmark = pytest.mark.node


@pytest.fixture(scope="session")
def cluster() -> Iterator[OperatorCluster]:
    elsewhere = os.environ.get("TFJOB_E2E_KUBECONFIG")
    if elsewhere:
        yield OperatorCluster.existing(Path(elsewhere))
        return
    reason = node_mod.missing_prerequisites()
    if reason:
        pytest.skip(reason)
    before = node_mod.read_sysctls()
    c = start()
    assert c.node is not None
    try:
        yield c
    finally:
        c.node.down()
    assert node_mod.leftovers() == []
    assert node_mod.read_sysctls() == before


@pytest.fixture
def node(cluster: OperatorCluster) -> node_mod.Node:
    """The real node, for tests that inject faults on the host (a stopped kube-apiserver...)."""
    if cluster.node is None:
        pytest.skip("injects its fault on the host of the real node (make cluster's bed)")
    return cluster.node


@pytest.fixture(scope="session")
def addons(cluster: OperatorCluster) -> Iterator[Addons]:
    """Kubeflow's release and Kueue, each installed once per run (tests/node/addons.py);
    removed at the end, unless a test has taken the node down with them."""
    installed = Addons(cluster)
    yield installed
    if cluster.node is None or cluster.node.plane.processes():
        installed.remove()


@pytest.fixture
def kubeflow_operator(addons: Addons) -> str:
    """The chart's second release, serving kubeflow.org: its namespace."""
    return addons.kubeflow()


@pytest.fixture
def second_node(node: node_mod.Node, addons: Addons) -> SecondNode:
    """A healthy second node, `tfjob-node-2`: the running one, or a fresh one if a test before
    killed or partitioned it. It stays up after the test (the next one reuses it); modules that
    use it run after the other node tests (see below), and find no add-on installed."""
    addons.remove()
    return node.second()


@pytest.fixture
def namespace(cluster: OperatorCluster, request) -> Iterator[str]:
    readable = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower().removeprefix("test_"))
    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:6]
    name = f"{readable[:40].strip('-')}-{digest}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def _last(items: list[pytest.Item], moved: set[Path]) -> None:
    """The tests of the `moved` modules, in their own order, after the other node tests and
    before the tests after those."""
    if not moved:
        return
    node_dir = Path(__file__).parent
    last = [i for i in items if i.path in moved]
    rest = [i for i in items if i.path not in moved]
    last_node = max((k for k, i in enumerate(rest) if i.path.parent == node_dir), default=-1)
    items[:] = rest[: last_node + 1] + last + rest[last_node + 1 :]


def _modules_using(items: list[pytest.Item], fixture: str) -> set[Path]:
    node_dir = Path(__file__).parent
    return {
        i.path
        for i in items
        if i.path.parent == node_dir and fixture in getattr(i, "fixturenames", ())
    }


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with a test that takes an add-on (Kubeflow's release, Kueue) run after the other
    one-node tests, which never see one; modules with a test that takes `second_node` after
    those (a second node, once up, stays up, and a killed one is replaced: the one-node tests
    never see one), each in their own order. test_teardown.py takes the session's cluster down:
    it runs after every other node test, whatever the other modules are named, and before the
    tests after them (so the node is not left running behind them)."""
    two_node = _modules_using(items, "second_node")
    _last(items, _modules_using(items, "addons") - two_node)
    _last(items, two_node)
    _last(items, {i.path for i in items if i.path == Path(__file__).parent / "test_teardown.py"})
