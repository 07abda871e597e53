"""The Helm chart without a cluster: it lints, its renders are valid Kubernetes objects for the
versions we support, its pod meets the restricted Pod Security Standard, a misspelt value fails,
and its CRD and RBAC rules are the generated ones, not copies that can drift."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tfjob_operator.api import crd, rbac
from tfjob_operator.api.spec import GROUPS
from tfjob_operator.controller.main import build_parser
from tfjob_testbed.core.tools import ensure_tools

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "tfjob-operator"
RELEASE, NAMESPACE = "tfjob-operator", "tfjob-system"
FULLNAME = "tfjob-operator"  # the release name is part of the chart name, so it is used alone
# The oldest Kubernetes that runs TF_CONFIG's pod-index label, and the newest we have schemas for.
KUBE_VERSIONS = ("1.28.0", kubernetes_validate.latest_version())
CLUSTER_SCOPED = {"customresourcedefinitions", "namespaces"}
KEEP = {"helm.sh/resource-policy": "keep"}

CUSTOM: dict[str, Any] = {
    "image": {
        "repository": "registry.example.com/ml/tfjob",
        "tag": "1.2.3",
        "pullPolicy": "Always",
    },
    "imagePullSecrets": [{"name": "regcred"}],
    "watchNamespaces": ["team-a", "team-b"],
    "metrics": {"enabled": False},
    "crds": {"install": False},
    "clusterDomain": "corp.internal",
    "logLevel": "debug",
    "logFormat": "json",
    "nodeSelector": {"kubernetes.io/os": "linux", "pool": "system"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}
    ],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "arch", "operator": "In", "values": ["amd64"]}]}
                ]
            }
        }
    },
    "serviceAccount": {"name": "tfjob-sa", "annotations": {"example.com/role": "ml"}},
    "podAnnotations": {"example.com/owner": "ml-platform"},
    "podLabels": {"team": "ml"},
}
VALUE_SETS = {"default": {}, "custom": CUSTOM}


@pytest.fixture(scope="module")
def helm() -> Path:
    return ensure_tools().helm


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=120, check=False
    )


def template(helm: Path, values: dict[str, Any], *args: str) -> list[dict[str, Any]]:
    """`helm template` with these values (given on stdin), as parsed objects."""
    proc = subprocess.run(
        [str(helm), "template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", "-", *args],
        input=yaml.safe_dump(values),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.fixture(scope="module")
def renders(helm) -> dict[str, list[dict[str, Any]]]:
    return {name: template(helm, values) for name, values in VALUE_SETS.items()}


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(docs, kind, name)
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (container,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def is_cluster_scoped(rule: dict[str, Any]) -> bool:
    return any(r.split("/")[0] in CLUSTER_SCOPED for r in rule["resources"])


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_lint_strict(helm, tmp_path, values):
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    proc = run_helm(helm, "lint", "--strict", str(CHART), "-f", str(values_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_renders_are_valid_kubernetes_objects(helm, values, kube_version):
    """Strict: an unknown or misplaced field fails too, not only a wrong type."""
    docs = template(helm, values, "--kube-version", kube_version)
    errors = []
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {e.message} at {e.path}")
    assert errors == []


@pytest.mark.parametrize("name", VALUE_SETS)
def test_operator_pod_meets_restricted_pod_security(renders, name):
    pod = one(renders[name], "Deployment")["spec"]["template"]["spec"]
    container = operator_container(renders[name])
    pod_sc, sc = pod.get("securityContext", {}), container["securityContext"]
    assert pod_sc.get("runAsNonRoot", sc.get("runAsNonRoot")) is True
    assert pod_sc.get("runAsUser", 1) != 0 and sc.get("runAsUser", 1) != 0
    seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile"))
    assert seccomp == {"type": "RuntimeDefault"}
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc.get("privileged", False) is False
    assert sc["readOnlyRootFilesystem"] is True
    assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod)
    assert all("hostPort" not in p for p in container["ports"])
    allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "projected", "secret"}
    assert all(set(v) - {"name"} <= allowed for v in pod["volumes"])
    # The read-only root needs a writable /tmp.
    assert {"name": "tmp", "emptyDir": {}} in pod["volumes"]
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


@pytest.mark.parametrize(
    ("setting", "why"),
    [
        ("imag.tag=x", "additional properties 'imag'"),
        ("metrics.prot=1", "additional properties 'prot'"),
        ("crds.instal=false", "additional properties 'instal'"),
        ("securityContext.runAsNonroot=true", "additional properties 'runAsNonroot'"),
        ("logLevel=verbose", "logLevel"),
        ("logFormat=text", "logFormat"),
        ("replicaCount=-1", "replicaCount"),
        ("gangScheduling.scheduler=kueue", "gangScheduling/scheduler"),
        ("gangScheduling.provider=native", "gangScheduling/provider"),
        ("leaderElection.leaseDuration=0", "leaderElection/leaseDuration"),
        ("metrics.serviceMonitor.interval=often", "serviceMonitor/interval"),
        ("metrics.port=8080", "metrics/port"),
        ("metrics.port=80", "metrics/port"),
        ("watchNamespaces={team-*}", "watchNamespaces"),
        ("clusterDomain=Cluster_Local", "clusterDomain"),
    ],
)
def test_bad_values_fail_on_the_schema(helm, setting, why):
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--set", setting)
    assert proc.returncode != 0
    assert "schema" in proc.stderr and why in proc.stderr, proc.stderr


def test_schema_refuses_unknown_keys_at_every_level():
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())

    def objects(node: dict[str, Any], path: str):
        if "properties" in node:
            yield path, node
            for key, sub in node["properties"].items():
                yield from objects(sub, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            yield from objects(node["items"], f"{path}[]")

    open_levels = [p for p, n in objects(schema, "$") if n.get("additionalProperties") is not False]
    assert open_levels == []


def test_every_value_is_documented():
    """helm-docs style: a `# --` comment right above each key, at every level."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    undocumented = []
    for i, line in enumerate(lines):
        if not re.match(r"^\s*[A-Za-z][\w.-]*:", line):
            continue
        j = i - 1
        while (
            j >= 0 and lines[j].strip().startswith("#") and not lines[j].strip().startswith("# --")
        ):
            j -= 1
        if j < 0 or not lines[j].strip().startswith("# --"):
            undocumented.append(line.strip())
    assert undocumented == []


def test_chart_metadata_matches_the_package():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == project["version"]
    # The oldest Kubernetes we test on is the oldest the chart installs on.
    assert chart["kubeVersion"] == f">={KUBE_VERSIONS[0]}-0"


def test_default_args_are_the_operators_flags(renders, monkeypatch):
    """The rendered command line parses with the operator's own parser, to the values."""
    container = operator_container(renders["default"])
    # The image's ENTRYPOINT runs the operator; the chart only gives it arguments.
    assert "command" not in container
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ENTRYPOINT .*tfjob[_-]operator", dockerfile, re.MULTILINE)
    for var in ("TFJOB_METRICS_PORT", "TFJOB_LIVENESS"):
        monkeypatch.delenv(var, raising=False)
    args = build_parser().parse_args(container["args"])
    assert args.standalone is True
    assert args.leader_elect is True
    assert args.leader_elect_resource_name == f"{FULLNAME}-leader"
    assert (
        args.leader_elect_lease_duration,
        args.leader_elect_renew_deadline,
        args.leader_elect_retry_period,
    ) == (15, 10, 2)
    assert args.gang_scheduler == "auto"  # Kubernetes' own gangs where served
    # The Lease names this replica by its pod and lives in the pod's namespace.
    env = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}) for e in container["env"]}
    assert env["POD_NAME"] == {"fieldPath": "metadata.name"}
    assert env["POD_NAMESPACE"] == {"fieldPath": "metadata.namespace"}
    assert args.liveness == "http://0.0.0.0:8080/healthz"
    assert args.namespace == []
    assert (args.cluster_domain, args.log_level, args.log_format) == (
        "cluster.local",
        "info",
        "full",
    )
    assert args.metrics_port == 9090
    assert container["image"] == "tfjob-operator/operator:0.1.0"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["resources"] == {
        "requests": {"cpu": "100m", "memory": "128Mi"},
        "limits": {"cpu": "500m", "memory": "256Mi"},
    }


def test_custom_args_are_the_operators_flags(renders, monkeypatch):
    monkeypatch.delenv("TFJOB_METRICS_PORT", raising=False)
    args = build_parser().parse_args(operator_container(renders["custom"])["args"])
    assert args.namespace == ["team-a", "team-b"]
    assert (args.cluster_domain, args.log_level, args.log_format) == (
        "corp.internal",
        "debug",
        "json",
    )
    assert args.metrics_port == 0


def test_probes_ports_and_metrics_service(renders):
    docs = renders["default"]
    container = operator_container(docs)
    ports = {p["name"]: p for p in container["ports"]}
    assert ports["health"]["containerPort"] == 8080  # the port of --liveness
    assert ports["metrics"]["containerPort"] == 9090
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    service = one(docs, "Service", f"{FULLNAME}-metrics")
    assert service["metadata"]["namespace"] == NAMESPACE
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}
    ]
    pod_labels = one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    # Explicit protocols: with the port number, the key server-side apply merges ports on.
    assert all(p["protocol"] == "TCP" for p in container["ports"])


def test_standard_labels_on_every_object(renders):
    for doc in renders["default"]:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "tfjob-operator"
        assert labels["app.kubernetes.io/instance"] == RELEASE
        assert labels["app.kubernetes.io/version"] == "0.1.0"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"


def test_custom_values_reach_the_pod(renders):
    docs = renders["custom"]
    deployment = one(docs, "Deployment")
    pod, container = deployment["spec"]["template"], operator_container(docs)
    assert container["image"] == "registry.example.com/ml/tfjob:1.2.3"
    assert container["imagePullPolicy"] == "Always"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    for key in ("nodeSelector", "tolerations", "affinity"):
        assert pod["spec"][key] == CUSTOM[key]
    assert pod["spec"]["serviceAccountName"] == "tfjob-sa"
    assert pod["metadata"]["annotations"] == CUSTOM["podAnnotations"]
    assert pod["metadata"]["labels"]["team"] == "ml"
    assert (
        deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    )
    account = one(docs, "ServiceAccount", "tfjob-sa")
    assert account["metadata"]["annotations"] == {"example.com/role": "ml"}
    assert find(docs, "Service") == []  # metrics disabled
    assert [p["name"] for p in container["ports"]] == ["health"]


def test_cluster_role_has_the_rbac_rules(renders):
    docs = renders["default"]
    assert one(docs, "ClusterRole", FULLNAME)["rules"] == rbac.RULES
    binding = one(docs, "ClusterRoleBinding", FULLNAME)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": FULLNAME,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": FULLNAME, "namespace": NAMESPACE}
    ]
    assert find(docs, "Role") == [lease_role(docs)]


def lease_role(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The leader-election Role: the generated Lease rules, for this release's Lease only."""
    role = one(docs, "Role", f"{FULLNAME}-leader-election")
    assert role["metadata"]["namespace"] == NAMESPACE
    want = [
        {**r, "resourceNames": [f"{FULLNAME}-leader"]} if "resourceNames" in r else r
        for r in rbac.LEASE_RULES
    ]
    assert role["rules"] == want
    binding = one(docs, "RoleBinding", f"{FULLNAME}-leader-election")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"][0]["namespace"] == NAMESPACE
    return role


def test_two_replicas_with_leader_election_a_budget_and_spread(renders):
    docs = renders["default"]
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    # The Lease keeps one reconciling: a rolling update may overlap old and new pods.
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    pdb = one(docs, "PodDisruptionBudget", FULLNAME)
    assert pdb["spec"]["minAvailable"] == 1
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    spread = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = spread["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= pod_labels.items()


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
def test_budget_is_policy_v1(helm, kube_version):
    docs = template(helm, {}, "--kube-version", kube_version)
    assert one(docs, "PodDisruptionBudget")["apiVersion"] == "policy/v1"


def test_kubernetes_older_than_1_28_is_refused(helm):
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--kube-version", "1.27.16")
    assert proc.returncode != 0 and "kubeVersion" in proc.stderr, proc.stderr


def test_plain_manifests_budget_is_the_charts(renders):
    """manifests/operator.yaml's budget (generated from its Deployment) and the chart's: same
    API, namespace and minAvailable; each selects exactly its Deployment's pods (the chart's
    pods carry one more label, app.kubernetes.io/instance, that the plain ones do without)."""
    plain = [d for d in yaml.safe_load_all((ROOT / "manifests" / "operator.yaml").read_text()) if d]
    budgets = {}
    for source, docs in (("manifests", plain), ("chart", renders["default"])):
        deployment, budget = one(docs, "Deployment"), one(docs, "PodDisruptionBudget")
        assert budget["metadata"]["namespace"] == deployment["metadata"]["namespace"], source
        selector = budget["spec"]["selector"]
        assert selector == deployment["spec"]["selector"], source
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector["matchLabels"].items() <= pod_labels.items(), source
        budgets[source] = budget
    manifests, chart = budgets["manifests"], budgets["chart"]
    assert manifests["apiVersion"] == chart["apiVersion"] == "policy/v1"
    assert manifests["metadata"]["namespace"] == chart["metadata"]["namespace"] == NAMESPACE
    assert manifests["spec"]["minAvailable"] == chart["spec"]["minAvailable"] == 1
    assert set(manifests["spec"]) == set(chart["spec"])
    chart_selector = chart["spec"]["selector"]["matchLabels"]
    want = {k: v for k, v in chart_selector.items() if k != "app.kubernetes.io/instance"}
    assert manifests["spec"]["selector"]["matchLabels"] == want


def test_one_replica_without_leader_election(helm):
    docs = template(helm, {"replicaCount": 1, "leaderElection": {"enabled": False}})
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    args = build_parser().parse_args(operator_container(docs)["args"])
    assert args.leader_elect is False
    assert find(docs, "PodDisruptionBudget") == find(docs, "Role") == []
    proc = run_helm(helm, "template", RELEASE, str(CHART), "--set", "leaderElection.enabled=false")
    assert proc.returncode != 0 and "needs leaderElection.enabled" in proc.stderr
    proc = run_helm(
        helm, "template", RELEASE, str(CHART), "--set", "leaderElection.renewDeadline=20"
    )
    assert proc.returncode != 0 and "leaseDuration > renewDeadline" in proc.stderr


@pytest.mark.parametrize(
    ("gang", "flag"),
    [
        ({}, "auto"),
        ({"provider": "none"}, "none"),
        ({"provider": "kubernetes"}, "kubernetes"),
        ({"provider": "volcano"}, "volcano"),
        ({"provider": "scheduler-plugins"}, "scheduler-plugins"),
        # The value it replaced, still read while provider is left at auto.
        ({"scheduler": "volcano"}, "volcano"),
        ({"provider": "none", "scheduler": "volcano"}, "none"),
    ],
)
def test_gang_provider_value_is_the_operators_flag(helm, gang, flag):
    values = {"gangScheduling": {**gang, "schedulerName": "gang"}}
    args = build_parser().parse_args(operator_container(template(helm, values))["args"])
    assert (args.gang_scheduler, args.gang_scheduler_name) == (flag, "gang")


def test_service_monitor_is_off_by_default_and_scrapes_the_metrics_port(helm, renders):
    assert find(renders["default"], "ServiceMonitor") == []
    values = {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}}
    docs = template(helm, values)
    monitor = one(docs, "ServiceMonitor", FULLNAME)
    assert monitor["metadata"]["labels"]["release"] == "prom"
    service = one(docs, "Service", f"{FULLNAME}-metrics")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "30s"}
    ]


def test_watched_namespaces_get_a_role_each_and_nothing_cluster_wide(renders):
    docs = renders["custom"]
    assert find(docs, "ClusterRole") == find(docs, "ClusterRoleBinding") == []
    namespaced = [r for r in rbac.RULES if not is_cluster_scoped(r)]
    for ns in CUSTOM["watchNamespaces"]:
        (role,) = [r for r in find(docs, "Role", FULLNAME) if r["metadata"]["namespace"] == ns]
        assert role["rules"] == namespaced
        (binding,) = [
            b for b in find(docs, "RoleBinding", FULLNAME) if b["metadata"]["namespace"] == ns
        ]
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": FULLNAME,
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "tfjob-sa", "namespace": NAMESPACE}
        ]
    lease_role(docs)
    assert len(find(docs, "Role")) == len(find(docs, "RoleBinding")) == 3


def without_chart_metadata(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in obj["metadata"].items() if k != "labels"}
    return {**obj, "metadata": metadata}


@pytest.mark.parametrize(
    ("crds", "annotations"), [({}, KEEP), ({"keep": False}, None)], ids=["keep", "no-keep"]
)
def test_crd_is_the_generated_one(helm, crds, annotations):
    got = one(template(helm, {"crds": crds}), "CustomResourceDefinition")
    want = crd.crd()
    if annotations:
        want["metadata"]["annotations"] = annotations
    assert without_chart_metadata(got) == want
    assert got["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"


@pytest.mark.parametrize("group", GROUPS)
def test_api_group_picks_the_crd_the_rules_and_the_flag(helm, group):
    """apiGroup: kubeflow.org serves Kubeflow's TFJobs: its CRD, the rules for its group (and
    none for the other), the operator's flag; in all namespaces and in named ones."""
    docs = template(helm, {"apiGroup": group})
    got = one(docs, "CustomResourceDefinition")
    assert without_chart_metadata(got) == {
        **crd.crd(group),
        "metadata": {**crd.crd(group)["metadata"], "annotations": KEEP},
    }
    assert one(docs, "ClusterRole", FULLNAME)["rules"] == rbac.rules(group)
    assert f"--api-group={group}" in operator_container(docs)["args"]
    named = template(helm, {"apiGroup": group, "watchNamespaces": ["team-a"]})
    (role,) = find(named, "Role", FULLNAME)
    assert role["rules"] == [r for r in rbac.rules(group) if not is_cluster_scoped(r)]
    assert {g for r in role["rules"] for g in r["apiGroups"]} & set(GROUPS) == {group}


def test_an_unknown_api_group_is_refused(helm):
    proc = run_helm(helm, "template", "t", str(CHART), "--set", "apiGroup=kubeflow.com")
    assert proc.returncode != 0 and "apiGroup" in proc.stderr, proc.stderr


def test_crd_install_false_leaves_it_out(renders):
    assert find(renders["custom"], "CustomResourceDefinition") == []


def test_templates_hold_no_copies_of_generated_files():
    """The CRD and the rules come from files/ through .Files.Get, or they would drift."""
    text = "\n".join(p.read_text() for p in (CHART / "templates").iterdir())
    for generated in ("crd.yaml", "crd-kubeflow.yaml", "rules.yaml", "job-rules"):
        assert f'"files/{generated}' in text, generated
    for copied in ("openAPIV3Schema", "tfjobs/status", "persistentvolumeclaims", "verbs:"):
        assert copied not in text


@pytest.mark.parametrize(("name", "want"), [("", "default"), ("existing", "existing")])
def test_an_existing_service_account(helm, name, want):
    docs = template(helm, {"serviceAccount": {"create": False, "name": name}})
    assert find(docs, "ServiceAccount") == []
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == want
    assert one(docs, "ClusterRoleBinding")["subjects"][0]["name"] == want


@pytest.mark.parametrize(
    ("group", "watch"),
    [("tfjob.dev", "kubectl get tfj -w"), ("kubeflow.org", "kubectl get tfjobs.kubeflow.org -w")],
)
def test_notes_speak_of_the_group_served(helm, group, watch):
    proc = run_helm(
        helm, "install", "t", str(CHART), "--dry-run=client", "--set", f"apiGroup={group}"
    )
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert watch in notes and f"kubectl delete crd tfjobs.{group}" in notes, notes
    assert ("mnist-ps.yaml" in notes) == (group == "tfjob.dev"), "examples are tfjob.dev's"


@pytest.mark.parametrize("manage_all", [False, True])
def test_kueue_value_adds_the_flag_and_only_the_rules_it_needs(helm, renders, manage_all):
    default = renders["default"]
    assert not build_parser().parse_args(operator_container(default)["args"]).kueue
    assert one(default, "ClusterRole")["rules"] == rbac.RULES, "off: no Kueue rule"

    docs = template(helm, {"kueue": {"enabled": True, "manageAll": manage_all}})
    args = build_parser().parse_args(operator_container(docs)["args"])
    assert args.kueue and args.kueue_manage_all is manage_all
    assert one(docs, "ClusterRole", FULLNAME)["rules"] == rbac.rules(kueue=True)

    # Named namespaces: Workloads in each one's Role; the flavor and priority-class reads,
    # read-only, in the only ClusterRole there is.
    docs = template(helm, {**CUSTOM, "kueue": {"enabled": True}})
    assert one(docs, "ClusterRole", FULLNAME)["rules"] == rbac.KUEUE_CLUSTER_RULES
    binding = one(docs, "ClusterRoleBinding", FULLNAME)
    assert binding["roleRef"]["name"] == FULLNAME
    for ns in CUSTOM["watchNamespaces"]:
        (role,) = [r for r in find(docs, "Role", FULLNAME) if r["metadata"]["namespace"] == ns]
        assert role["rules"][-len(rbac.KUEUE_RULES) :] == rbac.KUEUE_RULES


# The add-ons whose own ServiceAccount the chart grants access to: values key -> (the
# ClusterRole's name suffix, its rules, the account their own manifests name, the plain
# manifests' file).
ADDON_ACCESS = {
    # Kueue's webhooks read the TFJobs that own our children.
    "kueue": ("kueue-reader", rbac.KUEUE_READER_RULES,
              ("kueue-controller-manager", "kueue-system"), "kueue/rbac.yaml"),
    # Katib runs trials that are our TFJobs, and reads the StatefulSets between.
    "katib": ("katib", rbac.KATIB_RULES,
              ("katib-controller", "kubeflow"), "katib/rbac.yaml"),
}  # fmt: skip


def test_katibs_grant_follows_watch_namespaces(helm):
    """Watching some namespaces, Katib's account may make TFJobs in those only: a RoleBinding
    in each, no ClusterRoleBinding (that would let it run pods in every namespace)."""
    name = f"{FULLNAME}-katib"
    docs = template(helm, {"katib": {"enabled": True}, "watchNamespaces": ["team-a", "team-b"]})
    assert find(docs, "ClusterRoleBinding", name) == []
    bindings = [d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == name]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    for b in bindings:
        assert b["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": name,
        }
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": "katib-controller", "namespace": "kubeflow"}
        ]


@pytest.mark.parametrize("addon", ADDON_ACCESS)
@pytest.mark.parametrize("account", [{}, {"serviceAccount": {"name": "sa", "namespace": "ns"}}])
def test_an_addons_own_account_gets_its_access_only_when_enabled(helm, renders, addon, account):
    """With kueue.enabled, Kueue's own ServiceAccount may read TFJobs (files/kueue-reader-
    rules.yaml); with katib.enabled, Katib's gets files/katib-rules.yaml; each as the plain
    manifests grant it (manifests/<addon>/rbac.yaml); without it, nothing of the kind."""
    suffix, rules, (default_name, default_namespace), plain_file = ADDON_ACCESS[addon]
    name = f"{FULLNAME}-{suffix}"
    assert find(renders["default"], "ClusterRole", name) == []
    docs = template(helm, {addon: {"enabled": True, **account}})
    assert one(docs, "ClusterRole", name)["rules"] == rules
    binding = one(docs, "ClusterRoleBinding", name)
    assert binding["roleRef"]["name"] == name
    want = account.get("serviceAccount") or {"name": default_name, "namespace": default_namespace}
    assert binding["subjects"] == [{"kind": "ServiceAccount", **want}]
    plain = yaml.safe_load_all((ROOT / "manifests" / plain_file).read_text())
    by_kind = {(d["kind"], d["metadata"]["name"]): d for d in plain if d}
    assert by_kind[("ClusterRole", name)]["rules"] == rules
    assert by_kind[("ClusterRoleBinding", name)]["subjects"] == [
        {"kind": "ServiceAccount", "name": default_name, "namespace": default_namespace}
    ]


MAP_API = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"


@pytest.mark.parametrize(
    ("values", "args", "made"),
    [
        ({}, ("--api-versions", MAP_API), True),
        ({}, (), False),  # not served (before 1.36): nothing that would fail the install
        ({"kubeflowPodLabels": {"enabled": False}}, ("--api-versions", MAP_API), False),
    ],
    ids=["served", "not-served", "off"],
)
def test_the_pod_label_policies_are_the_generated_ones_named_for_the_release(
    helm, values, args, made
):
    docs = template(helm, values, *args)
    policies = find(docs, "MutatingAdmissionPolicy") + find(docs, "MutatingAdmissionPolicyBinding")
    if not made:
        assert policies == []
        return
    generated = [d for d in yaml.safe_load_all((CHART / "files" / "pod-labels.yaml").read_text())]
    assert len(policies) == len(generated) == 4
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in policies}
    for want in generated:
        name = want["metadata"]["name"]  # tfjob-operator-...: the release's fullname prefix
        got = by_name[(want["kind"], name)]
        assert got["spec"] == want["spec"]
        assert got["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


@pytest.mark.parametrize("side", ["manager", "worker"])
def test_multikueue_values_grant_each_side_what_kueue_does_there(helm, side):
    """On a manager, Kueue's own ServiceAccount updates the TFJobs it dispatches and copies
    their status; on a worker, an identity of its own for the manager's kubeconfig (a
    ServiceAccount and its token Secret), allowed what MultiKueue does there; the plain
    manifests hold both, the same."""
    off = template(helm, {"kueue": {"enabled": True}})
    assert not find(off, "ClusterRole", f"{FULLNAME}-multikueue-manager")
    assert not find(off, "ServiceAccount", f"{FULLNAME}-multikueue")
    docs = template(helm, {"kueue": {"enabled": True, "multikueue": {side: True}}})
    plain = [d for d in yaml.safe_load_all((ROOT / "manifests/kueue/multikueue.yaml").read_text())]
    if side == "manager":
        name, rules = f"{FULLNAME}-multikueue-manager", rbac.KUEUE_MANAGER_RULES
        subject = {"kind": "ServiceAccount", "name": "kueue-controller-manager",
                   "namespace": "kueue-system"}  # fmt: skip
        assert not find(docs, "ServiceAccount", f"{FULLNAME}-multikueue")
    else:
        name, rules = f"{FULLNAME}-multikueue", rbac.MULTIKUEUE_WORKER_RULES
        subject = {"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}
        assert one(docs, "ServiceAccount", name)["metadata"]["namespace"] == NAMESPACE
        secret = one(docs, "Secret", name)
        assert secret["type"] == "kubernetes.io/service-account-token"
        assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": name}
        assert not find(docs, "ClusterRole", f"{FULLNAME}-multikueue-manager")
    assert one(docs, "ClusterRole", name)["rules"] == rules
    assert one(docs, "ClusterRoleBinding", name)["subjects"] == [subject]
    (plain_role,) = [
        d for d in plain if d["kind"] == "ClusterRole" and d["metadata"]["name"] == name
    ]
    assert plain_role["rules"] == rules
    # what it may do is what Kueue's MultiKueue does on that side, and no pod or Secret
    verbs = {(r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"]}
    assert not {r for r, _ in verbs} & {"pods", "secrets", "statefulsets"}
