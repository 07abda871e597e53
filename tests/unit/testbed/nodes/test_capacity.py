"""The check a node makes of its host before it starts: each shortfall named in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfjob_testbed.nodes.capacity import GIB, NODE_DISK, NODE_MEMORY, Disk, shortfall

ROOMY = 16 * GIB
STATE, STORE = Path("/tmp/tfjob-node"), Path("/root/.cache/tfjob-operator/containerd")


def disks(free_state: int, free_store: int, same: bool = False, size: int = 100 * GIB):
    return [
        Disk("the node's state", STATE, 1, size, free_state),
        Disk("images", STORE, 1 if same else 2, size, free_store),
    ]


@pytest.mark.parametrize(
    ("given", "memory", "images", "says"),
    [
        (disks(ROOMY, ROOMY), ROOMY, 2 * GIB, None),
        # The kubelet's 1% floor of a 100 GiB disk comes on top of what the node writes.
        (disks(NODE_DISK + GIB, ROOMY), ROOMY, 0, None),
        (disks(NODE_DISK + GIB // 2, ROOMY), ROOMY, 0, "/tmp/tfjob-node (the node's state)"),
        (disks(ROOMY, 3 * GIB), ROOMY, 3 * GIB, "/root/.cache/tfjob-operator/containerd (images)"),
        # One filesystem for both: the images and the node's own writes add up on it.
        (disks(6 * GIB, 6 * GIB, same=True), ROOMY, 2 * GIB, "the node needs 7.0 GiB there"),
        (disks(8 * GIB, 8 * GIB, same=True), ROOMY, 2 * GIB, None),
        (disks(ROOMY, ROOMY), NODE_MEMORY, 0, "not enough memory for a node: 4.0 GiB available"),
    ],
)
def test_the_first_shortfall_is_named(given, memory, images, says):
    found = shortfall(given, memory, images)
    if says is None:
        assert found is None
    else:
        assert found is not None and says in found, found
        assert "\n" not in found
