"""What an add-on is installed on (`operator_cluster.OperatorCluster`, on the real node or on
kind), as a Protocol: the add-ons never import the cluster or the nodes."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any, Protocol


class TargetNode(Protocol):
    """A node of the cluster that an add-on's images are imported into (`nodes.node.Node`)."""

    def import_images(self, archives: list[Path]) -> None: ...


class TargetCluster(Protocol):
    """kubectl and helm on the cluster, and its node here, or None where the cluster is
    elsewhere (kind) and loads the images itself."""

    @property
    def node(self) -> TargetNode | None: ...

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]: ...

    def helm(self, *args: str) -> subprocess.CompletedProcess[str]: ...

    def get(self, *args: str) -> dict[str, Any]: ...
