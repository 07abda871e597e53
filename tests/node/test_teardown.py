"""The bed leaves the host as it found it, its second node too. Runs after every other module
here (the hook in tests/node/conftest.py puts it there): it takes the session's cluster down
(with a second node running), then runs `make cluster` twice more, ended once by a hang-up and
once (with two nodes) by `make cluster-down` from another process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.node.cluster_reads import POD_WAIT
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.nodes import host
from tfjob_testbed.nodes import node as node_mod
from tfjob_testbed.nodes import second_node as second_mod
from tfjob_testbed.operator_cluster import NAMESPACE, OperatorCluster

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_UP = "cluster is up"  # what `make cluster` prints once it is: "A one-node cluster..."

pytestmark = pytest.mark.node


def _assert_host_as_before(before: dict) -> None:
    assert node_mod.leftovers() == []
    assert node_mod.read_sysctls() == before["sysctls"]
    assert not Path("/sys/class/net", node_mod.BRIDGE).exists()
    for path in node_mod.FIXED_PATHS:
        assert os.path.lexists(path) == (path in before["fixed_paths"]), path
    # The second node's: its namespaces, veth, route, cgroups and state; /run/netns as it was.
    assert not second_mod.netns_path().exists()
    assert not Path("/sys/class/net", second_mod.HOST_VETH).exists()
    assert second_mod.POD_CIDR not in host.run("ip", "route").stdout
    assert not list(Path("/sys/fs/cgroup").glob(f"*/{second_mod.CGROUP_ROOT}"))
    assert not (node_mod.state_dir() / second_mod.SUBDIR).exists()
    assert host.is_mount_point(node_mod.NETNS_DIR) == before["netns_mounted"]


def _make_cluster(nodes: int) -> tuple[subprocess.Popen[str], list[str]]:
    """`make cluster NODES=<nodes>` as a person runs it, its output collected line by line;
    returns once it says the cluster is up."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfjob_testbed.operator_cluster", "up", "--nodes", str(nodes)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    out = proc.stdout
    assert out is not None

    def collect() -> None:
        for line in out:
            lines.append(line)

    threading.Thread(target=collect, daemon=True).start()
    wait_for(
        lambda: proc.poll() is not None or any(CLUSTER_UP in line for line in lines),
        POD_WAIT + 300,
        "make cluster to come up",
    )
    assert proc.poll() is None, "".join(lines[-40:])
    return proc, lines


@pytest.fixture(scope="module")
def before(cluster: OperatorCluster) -> dict:
    """The host as the session's node found it, read while that node is up."""
    if cluster.node is None:
        pytest.skip("takes the real node of make cluster's bed down")
    return json.loads((cluster.node.dir / "host.json").read_text())


@pytest.mark.smoke
def test_teardown_of_both_nodes_leaves_nothing(node: node_mod.Node, before: dict) -> None:
    node.second()  # up, if no test before left one running
    node.down()
    _assert_host_as_before(before)


def test_make_cluster_comes_up_again_and_goes_leaving_nothing(
    node: node_mod.Node, before: dict
) -> None:
    """`make cluster` twice more, ended once by SIGHUP and once by `make cluster-down`."""
    node.down()  # the session's node, if the test before has not taken it down
    _assert_host_as_before(before)
    for stop, nodes in (("SIGHUP", 1), ("cluster-down", 2)):
        proc, lines = _make_cluster(nodes)
        try:
            size = {1: "one-node", 2: "two-node"}[nodes]
            assert any(f"A {size} cluster is up" in line for line in lines), "".join(lines[-40:])
            cluster = OperatorCluster.existing(node.kubeconfig)
            ready = sorted(
                n["metadata"]["name"]
                for n in cluster.get("nodes")["items"]
                if {"type": "Ready", "status": "True"}
                in [{k: c[k] for k in ("type", "status")} for c in n["status"]["conditions"]]
            )
            assert ready == [node_mod.NODE_NAME, second_mod.NAME][:nodes], ready
            operator = cluster.get("pods", "-n", NAMESPACE)["items"]
            phases = [p["status"]["phase"] for p in operator]
            assert phases == ["Running", "Running"], phases  # the leader and its standby
            if stop == "SIGHUP":
                proc.send_signal(signal.SIGHUP)
            else:
                down = subprocess.run(
                    [sys.executable, "-m", "tfjob_testbed.operator_cluster", "down"],
                    cwd=ROOT, capture_output=True, text=True, timeout=300,
                )  # fmt: skip
                assert down.returncode == 0, down.stdout + down.stderr
            assert proc.wait(300) == 0, "".join(lines[-40:])
        finally:
            if proc.poll() is None:
                proc.kill()
        assert any("removed everything" in line for line in lines), "".join(lines[-40:])
        _assert_host_as_before(before)
