"""Kubeflow users' TFJobs on the real operator: as written, `kubeflow.org/v1`, where the operator
serves Kubeflow's group, and with only the apiVersion changed where it serves its own. Each one
runs (its StatefulSets and condition Created) or fails with InvalidSpec naming the field to
change, the same way in both groups.

The corpus is `tests/data/kubeflow/`. Some files name Kubeflow's namespace, as published
examples do; the test puts each job in its own namespace instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tfjob_operator.api.spec import GROUP, KUBEFLOW_GROUP, PLURAL, VERSION
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.core.paths import ROOT

pytestmark = pytest.mark.integration

CORPUS = sorted((ROOT / "tests" / "data" / "kubeflow").glob("*.yaml"))
WAIT = 30  # the operator answers a new job within a second or two


def _log_lines(log: Path, offset: int, namespace: str, name: str, limit: int = 20) -> str:
    """The operator's log lines about one job since `offset`, for a failure message."""
    with open(log, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    mine = [ln for ln in text.splitlines() if name in ln and namespace in ln]
    return "\n".join(mine[-limit:]) or "(none)"


def test_corpus_is_there():
    assert len(CORPUS) >= 10, CORPUS


@pytest.fixture(params=[KUBEFLOW_GROUP, GROUP])
def served(request) -> tuple[str, Any]:
    """(the group served, the operator that serves it)."""
    fixture = "kubeflow_operator" if request.param == KUBEFLOW_GROUP else "operator"
    return request.param, request.getfixturevalue(fixture)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.stem)
def test_kubeflow_manifest_runs_or_says_why(path, served, kubectl, custom, apps, ns):
    group, operator = served
    body: dict[str, Any] = yaml.safe_load(path.read_text())
    assert body["apiVersion"] == f"{KUBEFLOW_GROUP}/{VERSION}", "the corpus is as written"
    assert not body.get("spec", {}).get("checkpoint"), "Kubeflow has no checkpoint section"
    body["apiVersion"] = f"{group}/{VERSION}"
    body["metadata"]["namespace"] = ns
    name = body["metadata"]["name"]
    offset = operator.log.stat().st_size
    kubectl.apply(body)

    def conditions() -> list[dict[str, Any]]:
        job = custom.get_namespaced_custom_object(group, VERSION, ns, PLURAL, name)
        return (job.get("status") or {}).get("conditions") or []

    try:
        conds = wait_for(conditions, WAIT, f"a condition on TFJob {name}")
    except AssertionError:
        pytest.fail(
            f"{path.name}: TFJob {name} has no condition after {WAIT}s (silent). Operator log:\n"
            + _log_lines(operator.log, offset, ns, name),
            pytrace=False,
        )
    by_type = {c["type"]: c for c in conds}
    failed = by_type.get("Failed")
    if failed is not None and failed.get("status") == "True":
        assert failed.get("reason") == "InvalidSpec", f"{path.name}: {failed}"
        assert "spec." in failed.get("message", ""), f"message names no field: {failed}"
        return
    assert by_type.get("Created", {}).get("status") == "True", f"{path.name}: {conds}"
    want = {
        f"{name}-{rt.lower()}"
        for rt, rs in body["spec"]["tfReplicaSpecs"].items()
        if rs.get("replicas", 1) > 0
    }

    def statefulsets() -> set[str]:
        have = {s.metadata.name for s in apps.list_namespaced_stateful_set(ns).items}
        return want <= have and have

    wait_for(statefulsets, WAIT, f"StatefulSets {sorted(want)}")
