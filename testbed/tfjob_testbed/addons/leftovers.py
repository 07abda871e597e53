"""An add-on's objects that outlive its manager: found in every namespace, and let go of the
finalizers only that manager would take off (it is gone, or will not)."""

from __future__ import annotations

import json
import subprocess
from typing import Any, Protocol


class Kubectl(Protocol):
    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess[str]: ...


def objects(cluster: Kubectl, kinds: list[str]) -> list[dict[str, Any]]:
    """The objects of these kinds (`plural.group`), in every namespace; none while a kind is
    unknown."""
    if not kinds:
        return []
    got = cluster.kubectl("get", ",".join(kinds), "-A", "-o", "json", check=False)
    return json.loads(got.stdout).get("items", []) if got.returncode == 0 else []


def let_go(cluster: Kubectl, kinds: list[str]) -> None:
    """Takes every finalizer off the objects of these kinds."""
    for obj in objects(cluster, kinds):
        meta = obj["metadata"]
        if not meta.get("finalizers"):
            continue
        ref = f"{obj['kind'].lower()}.{obj['apiVersion'].split('/')[0]}/{meta['name']}"
        scope = ["-n", meta["namespace"]] if meta.get("namespace") else []
        cluster.kubectl("patch", ref, *scope, "--type=merge",
                        "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip
