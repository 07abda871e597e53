"""Kueue in the bed, as users install it: its manager built from the Go module of the Kueue
release in `testbed/go/kueue`, put in an image on the bed's base with the bed's podman, and
installed with Kueue's own Helm chart from the same module (webhooks and all), with only the
image, its pull policy and the manager's CPU request overridden. Its configuration is the
chart's default plus what docs/production.md tells users to add.

Also Kueue's CRDs as its release ships them (for the API-server tests, which run no Kueue), and
the Kueue objects the tests make: flavors, queues, priority classes, a topology.

Usage: ``python -m tfjob_testbed.addons.kueue_install`` builds the manager and its image (cached).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tfjob_testbed.addons.leftovers import delete_all, let_go
from tfjob_testbed.addons.target import TargetCluster
from tfjob_testbed.core.gobuild import KUEUE, ensure, module_source
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.images import podman

CRD_NAMES = (
    "workloads.kueue.x-k8s.io",
    "resourceflavors.kueue.x-k8s.io",
    # what a MultiKueue manager reads to default a job's spec.managedBy
    "admissionchecks.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "localqueues.kueue.x-k8s.io",
)
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
RELEASE, NAMESPACE = "kueue", "kueue-system"
# The name Kueue's releases are published under, so that the chart's override is what a user
# pinning a release writes.
REPOSITORY = "registry.k8s.io/kueue/kueue"
# What docs/production.md ("Queueing with Kueue") tells users to add to Kueue's configuration:
# the TFJobs of either group the operator queues (kubeflow.org's only while Kueue's own
# kubeflow.org/tfjob integration is off).
EXTERNAL_FRAMEWORKS = ["TFJob.v1.tfjob.dev", "TFJob.v1.kubeflow.org"]


def version() -> str:
    return KUEUE.version()


def tag() -> str:
    return f"{REPOSITORY}:{version()}"


def chart() -> Path:
    """Kueue's Helm chart, as its release's module carries it."""
    return module_source(KUEUE, "charts/kueue")


def build_image() -> podman.BuiltImage:
    """The manager (built from the module, cached) in an image on the bed's base, laid out as
    Kueue's own image is, saved for `ctr images import`."""
    return podman.program_image(ensure(KUEUE) / "manager", tag(), user="65532:65532")


def configuration(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Kueue's Configuration: the chart's default, the external framework our docs name, and
    `extra` (a test's waitForPodsReady, fairSharing, ...), merged at the top level."""
    values = yaml.safe_load((chart() / "values.yaml").read_text())
    config: dict[str, Any] = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    config["integrations"]["externalFrameworks"] = list(EXTERNAL_FRAMEWORKS)
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def chart_values(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The chart's values as the bed sets them: the image built here (never pulled: no registry
    is reachable), a CPU request that leaves room for training on a 2-core node, and the
    Configuration."""
    return {
        "controllerManager": {
            "manager": {
                "image": {"repository": REPOSITORY, "tag": version(), "pullPolicy": "Never"},
                "resources": {
                    "requests": {"cpu": "100m", "memory": "256Mi"},
                    "limits": {"cpu": "2", "memory": "512Mi"},
                },
            }
        },
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(configuration(extra))},
    }


def install(
    cluster: TargetCluster, extra: dict[str, Any] | None = None, timeout: float = 300
) -> None:
    """Kueue's chart on the bed's cluster (or upgraded to `extra`'s configuration), the image
    imported into the node's containerd; returns once its webhooks answer."""
    built = build_image()
    if cluster.node is not None:
        cluster.node.import_images([built.archive])
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values:
        yaml.safe_dump(chart_values(extra), values)
        values.flush()
        cluster.helm(
            "upgrade", "--install", RELEASE, str(chart()), "--namespace", NAMESPACE,
            "--create-namespace", "--values", values.name, "--wait", "--timeout", f"{timeout:.0f}s",
        )  # fmt: skip
    # A new manager may still be starting behind a Ready old one: wait until the rollout is done,
    # then until its webhook admits an object (the API server calls it; it fails closed).
    cluster.kubectl("rollout", "status", "deployment", "-n", NAMESPACE, f"--timeout={timeout:.0f}s")
    probe = yaml.safe_dump({
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor",
        "metadata": {"name": "webhook-probe"}, "spec": {},
    })  # fmt: skip
    wait_for(
        lambda: (
            cluster.kubectl(
                "create", "--dry-run=server", "-f", "-", input=probe, check=False
            ).returncode
            == 0
        ),
        timeout,
        "Kueue's webhook to answer",
    )


# Kueue's objects, in the order they are deleted before Kueue itself: each kind's finalizers
# are Kueue's, taken off by its manager, so they go while it still runs.
NAMESPACED_KINDS = ("workloads", "localqueues")
CLUSTER_KINDS = ("clusterqueues", "cohorts", "resourceflavors", "topologies",
                 "workloadpriorityclasses")  # fmt: skip


def uninstall(cluster: TargetCluster, timeout: float = 300) -> None:
    """Every Kueue object deleted while its manager still takes their finalizers off (those it
    keeps longer are let go), then the chart, with its webhooks and CRDs."""
    kinds = [f"{k}.{GROUP}" for k in (*NAMESPACED_KINDS, *CLUSTER_KINDS)]
    if cluster.get("crd", f"clusterqueues.{GROUP}"):
        delete_all(cluster, kinds, 60)
    cluster.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--ignore-not-found")
    cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true",
                    f"--timeout={timeout:.0f}s", check=False)  # fmt: skip
    left: list[str] = []

    def gone() -> bool:
        crds = [
            c.removeprefix("customresourcedefinition.apiextensions.k8s.io/")
            for c in cluster.kubectl("get", "crd", "-o", "name", check=False).stdout.split()
            if c.endswith(f".{GROUP}")
        ]
        # A Workload Kueue made again for a job still being deleted, after the deletion above,
        # keeps its finalizer with no manager left to take it off: its CRD would never go.
        let_go(cluster, crds)
        # The aggregation controller applies an aggregated ClusterRole back when its deletion
        # races its own write: delete what it brought back.
        roles = [
            r for r in cluster.kubectl("get", "clusterrole", "-o", "name").stdout.split()
            if r.startswith(f"clusterrole.rbac.authorization.k8s.io/{RELEASE}-")
        ]  # fmt: skip
        if roles:
            cluster.kubectl("delete", *roles, "--ignore-not-found", check=False)
        left[:] = crds + roles
        return not left

    try:
        wait_for(gone, timeout, "Kueue's CRDs and roles gone", interval=1)
    except AssertionError as e:
        raise AssertionError(f"{e}; still there: {', '.join(left)}") from None


def crd_documents() -> str:
    """Kueue's Workload and ResourceFlavor CRDs as its release ships them, for `kubectl
    create -f -` (not apply: the Workload CRD is too large for kubectl's last-applied
    annotation)."""
    bases = module_source(KUEUE, "config/components/crd/bases")
    files = [bases / f"{name.split('.', 1)[1]}_{name.split('.', 1)[0]}.yaml" for name in CRD_NAMES]
    return "\n---\n".join(f.read_text() for f in files)


def kueue_object(kind: str, name: str, spec: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": kind,
        "metadata": {"name": name, **meta},
        "spec": spec,
    }


def flavor(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return kueue_object("ResourceFlavor", name, spec)


def cluster_queue(
    name: str, quotas: dict[str, dict[str, str]], cohort: str | None = None, **spec: Any
) -> dict[str, Any]:
    """A ClusterQueue open to every namespace; `quotas`: flavor -> resource -> nominal quota,
    in order (the order Kueue tries the flavors in)."""
    resources = sorted({r for q in quotas.values() for r in q})
    body: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": resources,
                "flavors": [
                    {"name": f, "resources": [{"name": r, "nominalQuota": q[r]} for r in resources]}
                    for f, q in quotas.items()
                ],
            }
        ],
        **spec,
    }
    if cohort:
        body["cohortName"] = cohort
    return kueue_object("ClusterQueue", name, body)


def local_queue(name: str, namespace: str, cluster_queue: str, **spec: Any) -> dict[str, Any]:
    return kueue_object(
        "LocalQueue", name, {"clusterQueue": cluster_queue, **spec}, namespace=namespace
    )


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def topology(name: str, levels: list[str]) -> dict[str, Any]:
    return kueue_object("Topology", name, {"levels": [{"nodeLabel": label} for label in levels]})


def condition(workload: dict[str, Any], type_: str) -> dict[str, Any]:
    """A condition of a Workload, {} while it has none of that type."""
    conditions = (workload.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


def _main() -> int:
    return podman.build_command(lambda: [build_image()])


if __name__ == "__main__":
    sys.exit(_main())
