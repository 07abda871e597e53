"""An add-on's objects that outlive its manager: found in every namespace, and let go of the
finalizers only that manager would take off (it is gone, or will not)."""

from __future__ import annotations

import json
from typing import Any

from tfjob_testbed.addons.target import TargetCluster
from tfjob_testbed.core.kube import wait_for


def objects(cluster: TargetCluster, kinds: list[str]) -> list[dict[str, Any]]:
    """The objects of these kinds (`plural.group`), in every namespace; none while a kind is
    unknown."""
    if not kinds:
        return []
    got = cluster.kubectl("get", ",".join(kinds), "-A", "-o", "json", check=False)
    return json.loads(got.stdout).get("items", []) if got.returncode == 0 else []


def let_go(cluster: TargetCluster, kinds: list[str]) -> None:
    """Takes every finalizer off the objects of these kinds."""
    for obj in objects(cluster, kinds):
        meta = obj["metadata"]
        if not meta.get("finalizers"):
            continue
        ref = f"{obj['kind'].lower()}.{obj['apiVersion'].split('/')[0]}/{meta['name']}"
        scope = ["-n", meta["namespace"]] if meta.get("namespace") else []
        cluster.kubectl("patch", ref, *scope, "--type=merge",
                        "-p", '{"metadata":{"finalizers":null}}', check=False)  # fmt: skip


def delete_all(cluster: TargetCluster, kinds: list[str], timeout: float) -> None:
    """Every object of these kinds deleted while their manager still runs and takes its
    finalizers off; what is left after `timeout` (held by a finalizer it keeps) is let go."""
    for kind in kinds:
        cluster.kubectl("delete", kind, "--all", "--all-namespaces", "--wait=false",
                        check=False)  # fmt: skip
    try:
        wait_for(lambda: not objects(cluster, kinds), timeout, f"{', '.join(kinds)} deleted")
    except AssertionError:
        let_go(cluster, kinds)
