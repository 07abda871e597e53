"""manifests/: what the single sources generate (`make generate`), valid Kubernetes objects,
and an operator pod that meets the restricted Pod Security Standard."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tfjob_operator.controller.main import build_parser
from tfjob_operator.render import manifests as render

ROOT = Path(__file__).resolve().parents[4]
FILES = ["crd.yaml", "operator.yaml", "rbac.yaml"]


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((ROOT / "manifests" / name).read_text()) if d]


def test_generated_files_are_current():
    """manifests/ and the chart hold what the single sources generate (`make generate`)."""
    for path, text in render.outputs(ROOT).items():
        assert path.read_text() == text, f"{path.relative_to(ROOT)} is stale: run make generate"


@pytest.mark.parametrize("version", ["1.28.0", kubernetes_validate.latest_version()])
@pytest.mark.parametrize("name", FILES)
def test_manifests_validate_strictly(name, version):
    for doc in docs(name):
        kubernetes_validate.validate(doc, version, strict=True)


def test_operator_pod_is_restricted_and_probed():
    deployment = next(d for d in docs("operator.yaml") if d["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID")
    assert all("hostPath" not in v for v in pod.get("volumes", []))
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]} and not sc.get("privileged")
    assert set(container["resources"]) == {"requests", "limits"}
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"
    args = build_parser().parse_args(container["args"])  # the operator's own flags
    assert args.standalone and args.liveness == "http://0.0.0.0:8080/healthz"
    assert args.metrics_port == 9090
    assert pod["serviceAccountName"] == docs("rbac.yaml")[0]["metadata"]["name"]


def test_files_apply_in_order():
    """kubectl applies a folder alphabetically: the namespace comes before what lives in it."""
    assert sorted(p.name for p in (ROOT / "manifests").glob("*.yaml")) == FILES
    assert docs("operator.yaml")[0]["kind"] == "Namespace"


def test_operator_budget_keeps_a_replica_through_drains():
    """policy/v1 (Kubernetes 1.28+), generated from the Deployment: it selects its pods."""
    operator = docs("operator.yaml")
    assert [d["kind"] for d in operator] == ["Namespace", "Deployment", "PodDisruptionBudget"]
    deployment, budget = operator[1:]
    assert budget["apiVersion"] == "policy/v1"
    assert budget["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert budget["spec"] == {"minAvailable": 1, "selector": deployment["spec"]["selector"]}
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert deployment["spec"]["replicas"] > budget["spec"]["minAvailable"], "drains can proceed"


def test_operator_budget_only_with_several_replicas():
    text = (ROOT / "manifests" / "operator.yaml").read_text()
    assert render.plain_operator(text) == text, "regenerating changes nothing"
    one_replica = text.replace("\n  replicas: 2\n", "\n  replicas: 1\n")
    assert one_replica != text
    kinds = [d["kind"] for d in yaml.safe_load_all(render.plain_operator(one_replica)) if d]
    assert kinds == ["Namespace", "Deployment"]
