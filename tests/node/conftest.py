"""One cluster for every test under tests/node: the real node of `make cluster` (images built from
the Dockerfile, the operator installed by its chart), or, with TFJOB_E2E_KUBECONFIG set, a
cluster brought up elsewhere with the chart installed (tests/e2e/kind.sh). Tests that inject
faults on the host take the `node` fixture and skip on other clusters."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tfjob_testbed import node as node_mod
from tfjob_testbed.cluster import Cluster, start

pytestmark = pytest.mark.node


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    elsewhere = os.environ.get("TFJOB_E2E_KUBECONFIG")
    if elsewhere:
        yield Cluster.existing(Path(elsewhere))
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
def node(cluster: Cluster) -> node_mod.Node:
    """The real node, for tests that inject faults on the host (a stopped kube-apiserver...)."""
    if cluster.node is None:
        pytest.skip("injects its fault on the host of the real node (make cluster's bed)")
    return cluster.node


@pytest.fixture
def namespace(cluster: Cluster, request) -> Iterator[str]:
    readable = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower().removeprefix("test_"))
    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:6]
    name = f"{readable[:40].strip('-')}-{digest}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """test_teardown.py takes the session's cluster down: it runs after every other node test,
    whatever the other modules are named, and before the tests after them (so the node is not
    left running behind them)."""
    teardown = [i for i in items if i.path.name == "test_teardown.py"]
    if not teardown:
        return
    rest = [i for i in items if i.path.name != "test_teardown.py"]
    node_dir = teardown[0].path.parent
    last_node = max((k for k, i in enumerate(rest) if i.path.parent == node_dir), default=-1)
    items[:] = rest[: last_node + 1] + teardown + rest[last_node + 1 :]
