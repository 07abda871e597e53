"""The CRD is generated from the API models (that the checked-in copies do not drift:
render/test_manifests.py)."""

from __future__ import annotations

from pathlib import Path

import yaml

from tfjob_operator.api import crd

ROOT = Path(__file__).resolve().parents[4]


def walk(node, path="$"):
    yield path, node
    if isinstance(node, dict):
        for k, v in (node.get("properties") or {}).items():
            yield from walk(v, f"{path}.{k}")
        if isinstance(node.get("additionalProperties"), dict):
            yield from walk(node["additionalProperties"], f"{path}.*")
        if isinstance(node.get("items"), dict):
            yield from walk(node["items"], f"{path}[]")


def schema():
    return crd.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_schema_is_structural():
    for path, node in walk(schema()):
        # Kubernetes' one exception: int-or-string (a quantity) is typed by its anyOf.
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert not {"$ref", "anyOf", "title"} & set(node), path
        # Defaults are the operator's, said in descriptions; but for the one Kubeflow's SDK
        # needs stored: a runPolicy, even an empty one.
        assert "default" not in node or (path, node["default"]) == ("$.spec.runPolicy", {}), path


def test_spec_fields_are_described_for_kubectl_explain():
    spec = schema()["properties"]["spec"]
    undocumented = [p for p, n in walk(spec) if "description" not in n and not p.endswith("[]")]
    assert undocumented == []


def test_pod_template_is_kept_whole():
    worker = schema()["properties"]["spec"]["properties"]["tfReplicaSpecs"]["additionalProperties"]
    template = worker["properties"]["template"]
    assert template["type"] == "object" and template["x-kubernetes-preserve-unknown-fields"]
    assert worker["required"] == ["template"]


def test_names_and_subresources():
    obj = yaml.safe_load((ROOT / "manifests" / "crd.yaml").read_text())
    assert obj["metadata"]["name"] == "tfjobs.tfjob.dev"
    names = obj["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == ("TFJob", "tfjobs", ["tfj"])
    version = obj["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert {"State", "Age", "Active", "Restarts"} <= set(columns)
