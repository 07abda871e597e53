"""How the bed installs Katib: its own manifests from its Go module, changed only where
`katib.adapt` says (the UI left out, images never pulled, the database's image the bed's, and
katib-config's trial resources and goptuna algorithms)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from tfjob_testbed.addons import katib
from tfjob_testbed.core.gobuild import KATIB, module_source
from tfjob_testbed.core.tools import ensure_tools


@pytest.fixture(scope="module")
def shipped() -> list[dict[str, Any]]:
    """katib-standalone-postgres as `kubectl kustomize` renders it from Katib's module."""
    kubectl = ensure_tools().kubectl
    rendered = subprocess.run(
        [str(kubectl), "kustomize", str(module_source(KATIB, katib.INSTALL))],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return [d for d in yaml.safe_load_all(rendered.stdout) if d]


def by_name(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in docs}


def config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    cm = by_name(docs)[("ConfigMap", "katib-config")]
    return yaml.safe_load(cm["data"]["katib-config.yaml"])


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return doc["spec"]["template"]["spec"]["containers"]


def test_only_the_ui_is_left_out(shipped):
    kept = by_name(katib.adapt(shipped))
    dropped = set(by_name(shipped)) - set(kept)
    assert dropped and all(name == katib.UI for _, name in dropped), dropped
    assert ("Deployment", "katib-controller") in kept
    assert ("MutatingWebhookConfiguration", katib.WEBHOOKS) in kept
    assert {name for kind, name in kept if kind == "CustomResourceDefinition"} == set(katib.CRDS)


@pytest.mark.parametrize(
    ("deployment", "image"),
    [
        ("katib-controller", katib.tag("katib-controller")),
        ("katib-db-manager", katib.tag("katib-db-manager")),
        ("katib-postgres", katib.POSTGRES),
    ],
)
def test_images_are_the_beds_and_never_pulled(shipped, deployment, image):
    (container,) = containers(by_name(katib.adapt(shipped))[("Deployment", deployment)])
    assert container["image"] == image
    assert container["imagePullPolicy"] == "Never"


def test_nothing_else_of_a_deployment_changes(shipped):
    before, after = by_name(shipped), by_name(katib.adapt(shipped))
    for key, doc in after.items():
        if key[0] != "Deployment":
            if key != ("ConfigMap", "katib-config"):
                assert doc == before[key], key
            continue
        original = before[key]
        for mine, theirs in zip(containers(doc), containers(original), strict=True):
            rest = {k: v for k, v in mine.items() if k not in ("image", "imagePullPolicy")}
            assert rest == {k: v for k, v in theirs.items() if k != "image"}, key


def test_katib_config_adds_our_trial_resource_and_sends_goptuna_algorithms_to_it(shipped):
    before, after = config(shipped), config(katib.adapt(shipped))
    resources = after["init"]["controller"]["trialResources"]
    assert resources == before["init"]["controller"]["trialResources"] + katib.TRIAL_RESOURCES
    assert "TFJob.v1.kubeflow.org" in resources
    images = {s["algorithmName"]: s["image"] for s in after["runtime"]["suggestions"]}
    for algorithm in katib.GOPTUNA_ALGORITHMS:
        assert images[algorithm] == katib.tag("suggestion-goptuna")
    collectors = {c["kind"]: c["image"] for c in after["runtime"]["metricsCollectors"]}
    assert collectors["StdOut"] == katib.tag("file-metrics-collector")
    assert after["runtime"]["metricsCollectors"] == before["runtime"]["metricsCollectors"]


def test_adapt_twice_is_adapt_once(shipped):
    once = katib.adapt(shipped)
    assert katib.adapt(once) == once
