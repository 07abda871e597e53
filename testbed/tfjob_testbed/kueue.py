"""Kueue in the bed, as users install it: its manager built from the Go module of the Kueue
release in `testbed/go/kueue`, put in an image on the bed's base with the bed's podman, and
installed with Kueue's own Helm chart from the same module (webhooks and all), with only the
image, its pull policy and the manager's CPU request overridden. Its configuration is the
chart's default plus what docs/production.md tells users to add.

Also Kueue's CRDs as its release ships them (for the API-server tests, which run no Kueue), and
readers of a Workload's conditions.

Usage: ``python -m tfjob_testbed.kueue`` builds the manager and its image (cached).
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tfjob_testbed import images
from tfjob_testbed.gobuild import KUEUE, ensure, module_source
from tfjob_testbed.kube import wait_for

if TYPE_CHECKING:
    from tfjob_testbed.cluster import Cluster

CRD_NAMES = ("workloads.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io")
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
NOW = "2026-01-01T00:00:00Z"
RELEASE, NAMESPACE = "kueue", "kueue-system"
# The name Kueue's releases are published under, so that the chart's override is what a user
# pinning a release writes.
REPOSITORY = "registry.k8s.io/kueue/kueue"
# What docs/production.md ("Queueing with Kueue") tells users to add to Kueue's configuration.
EXTERNAL_FRAMEWORKS = ["TFJob.v1.tfjob.dev"]
CONTAINERFILE = """FROM {base}
COPY manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
"""


def version() -> str:
    return KUEUE.version()


def tag() -> str:
    return f"{REPOSITORY}:{version()}"


def chart() -> Path:
    """Kueue's Helm chart, as its release's module carries it."""
    return module_source(KUEUE, "charts/kueue")


def build_image() -> images.BuiltImage:
    """The manager (built from the module, cached) in an image on the bed's base, saved for
    `ctr images import`; nothing is rebuilt while the binary and the base are unchanged."""
    manager = ensure(KUEUE) / "manager"
    with images._locked():
        base = images.ensure_base()
        digest = hashlib.sha256(f"kueue v1\0{tag()}\0{images.image_id(base)}\0".encode())
        digest.update(CONTAINERFILE.encode())
        digest.update(hashlib.sha256(manager.read_bytes()).digest())
        key = digest.hexdigest()
        stamp = images.images_dir() / "kueue.stamp"
        stamped_key, _, stamped_id = (stamp.read_text() if stamp.exists() else "").partition(" ")
        stamped_id = stamped_id.strip()
        if stamped_key != key or images._podman_quiet_id(tag()) != stamped_id:
            with tempfile.TemporaryDirectory() as context:
                (Path(context) / "manager").write_bytes(manager.read_bytes())
                (Path(context) / "manager").chmod(0o755)
                (Path(context) / "Containerfile").write_text(CONTAINERFILE.format(base=base))
                images._podman(
                    "build", "--file", str(Path(context) / "Containerfile"), "--pull=never",
                    "--network=none", *images.ULIMITS, "--tag", tag(), context,
                    log=images.images_dir() / "logs" / "build-kueue.log",
                )  # fmt: skip
            built = images.image_id(tag())
            stamp.write_text(f"{key} {built}\n")
            if stamped_id and stamped_id != built:
                images._drop_untagged(stamped_id)
            stamped_id = built
        return images.BuiltImage((tag(),), stamped_id, images.archive(stamped_id))


def configuration(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Kueue's Configuration: the chart's default, the external framework our docs name, and
    `extra` (a test's waitForPodsReady, fairSharing, ...), merged at the top level."""
    values = yaml.safe_load((chart() / "values.yaml").read_text())
    config = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
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


def install(cluster: Cluster, extra: dict[str, Any] | None = None, timeout: float = 300) -> None:
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


def uninstall(cluster: Cluster, timeout: float = 300) -> None:
    """The chart removed (its webhooks, CRDs and every Kueue object with them)."""
    cluster.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--ignore-not-found", "--wait",
                 "--timeout", f"{timeout:.0f}s")  # fmt: skip
    cluster.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true",
                    f"--timeout={timeout:.0f}s", check=False)  # fmt: skip


def crd_documents() -> str:
    """Kueue's Workload and ResourceFlavor CRDs as its release ships them, for `kubectl
    create -f -` (not apply: the Workload CRD is too large for kubectl's last-applied
    annotation)."""
    bases = module_source(KUEUE, "config/components/crd/bases")
    files = [bases / f"{name.split('.', 1)[1]}_{name.split('.', 1)[0]}.yaml" for name in CRD_NAMES]
    return "\n---\n".join(f.read_text() for f in files)


def flavor(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": spec,
    }


def cond(type_: str, status: bool, reason: str, message: str = "") -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message or reason,
        "lastTransitionTime": NOW,
    }


def condition(workload: dict[str, Any], type_: str) -> dict[str, Any]:
    conditions = (workload.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_), {})


def status_write(current: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    """Kueue's write of a Workload's status, as a merge patch on `current`: conditions set by
    type (the rest of the list kept), other fields as given."""
    conditions = {c["type"]: c for c in (current.get("status") or {}).get("conditions") or []}
    for c in status.get("conditions", []):
        conditions[c["type"]] = c
    rest = {k: v for k, v in status.items() if k != "conditions"}
    return {"status": {**rest, "conditions": list(conditions.values())}}


def admission(
    workload: dict[str, Any], flavor_name: str, updates: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """What Kueue's scheduler writes when it admits `workload` on one flavor; `updates`, the
    pod set updates of an admission check that is Ready."""
    checks = (
        {"admissionChecks": [{"name": "provisioning", "state": "Ready", "message": "Provisioned",
                              "lastTransitionTime": NOW, "podSetUpdates": updates}]}
        if updates is not None
        else {}
    )  # fmt: skip
    return {
        **checks,
        "admission": {
            "clusterQueue": "cluster-a",
            "podSetAssignments": [
                {
                    "name": p["name"],
                    "flavors": {"cpu": flavor_name, "memory": flavor_name},
                    "count": p["count"],
                }
                for p in workload["spec"]["podSets"]
            ],
        },
        "conditions": [
            cond(
                "QuotaReserved", True, "QuotaReserved", "Quota reserved in ClusterQueue cluster-a"
            ),
            cond("Admitted", True, "Admitted", "The workload is admitted"),
            cond("Evicted", False, "QuotaReserved", "Previously: preempted"),
        ],
    }


# What Kueue's scheduler writes when it preempts a Workload for a higher-priority one.
PREEMPTION = {
    "conditions": [
        cond("Evicted", True, "Preempted", "Preempted to accommodate a higher priority Workload"),
        cond(
            "Preempted",
            True,
            "InClusterQueue",
            "Preempted to accommodate a higher priority Workload",
        ),
    ]
}


def _main() -> int:
    return images.build_command(lambda: [build_image()])


if __name__ == "__main__":
    sys.exit(_main())
