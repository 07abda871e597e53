"""manifests/: valid Kubernetes objects, and an operator pod that meets the restricted Pod
Security Standard."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tfjob_operator.controller.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
FILES = ["crd.yaml", "operator.yaml", "rbac.yaml"]


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((ROOT / "manifests" / name).read_text()) if d]


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
