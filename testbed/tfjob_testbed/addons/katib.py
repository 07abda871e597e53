"""Katib in the bed, as users install it: its controller, db-manager, goptuna suggestion service
and file metrics collector built from the Go module of the Katib release in `testbed/go/katib`,
each in an image on the bed's base under the name Katib publishes it; PostgreSQL from Debian's
packages in an image of the bed's; installed with Katib's own `katib-standalone-postgres`
kustomization read from the same module (`kubectl kustomize`), changed only where `adapt` says.

Usage: ``python -m tfjob_testbed.addons.katib`` builds the images (cached).
"""

from __future__ import annotations

import copy
import hashlib
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tfjob_testbed.addons.leftovers import delete_all, let_go
from tfjob_testbed.addons.target import TargetCluster
from tfjob_testbed.core.gobuild import KATIB, ensure, module_source
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.images import debian_base, docker_archive, podman, podman_store

GROUP, VERSION = "kubeflow.org", "v1beta1"
NAMESPACE = "kubeflow"  # where Katib's manifests put it
INSTALL = "manifests/v1beta1/installs/katib-standalone-postgres"
REPOSITORY = "ghcr.io/kubeflow/katib"
# Katib's images built here: image name -> (program, the directory its image runs it from).
PROGRAMS = {
    "katib-controller": ("katib-controller", "/app"),
    "katib-db-manager": ("katib-db-manager", "/app"),
    "suggestion-goptuna": ("goptuna-suggestion", "/opt/katib"),
    "file-metrics-collector": ("file-metricscollector", "/app"),
}
POSTGRES = "localhost/tfjob-operator/katib-postgres:15"
POSTGRES_PACKAGES = "postgresql-15"
# The UI is a web front end built with npm: not part of what the bed installs.
UI = "katib-ui"
# What docs/katib.md tells users to add to katib-config: our group's TFJob as a trial resource.
TRIAL_RESOURCES = ["TFJob.v1.tfjob.dev"]
# The algorithms Katib's goptuna service serves; Katib's config sends random and tpe to its
# Python (hyperopt) image, which is not built here.
GOPTUNA_ALGORITHMS = ("random", "tpe", "cmaes", "sobol")
CRDS = tuple(f"{p}.{GROUP}" for p in ("experiments", "trials", "suggestions"))
WEBHOOKS = "katib.kubeflow.org"  # the name of both of Katib's webhook configurations

# The official postgres image's contract, which Katib's manifest relies on: POSTGRES_USER,
# POSTGRES_PASSWORD and POSTGRES_DB make the role and database on first start in PGDATA.
POSTGRES_ENTRYPOINT = """#!/bin/sh
set -eu
BIN=/usr/lib/postgresql/15/bin
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
if [ ! -s "$PGDATA/PG_VERSION" ]; then
    printf '%s\\n' "$POSTGRES_PASSWORD" > /run/postgresql/pw
    chown postgres /run/postgresql/pw
    as_postgres "$BIN/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile=/run/postgresql/pw \\
        --auth-local=trust --auth-host=scram-sha-256
    rm /run/postgresql/pw
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    as_postgres "$BIN/pg_ctl" -D "$PGDATA" -o "-c listen_addresses=''" -w start
    as_postgres psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres \\
        -c "CREATE DATABASE \\"$POSTGRES_DB\\""
    as_postgres "$BIN/pg_ctl" -D "$PGDATA" -m fast -w stop
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups \\
    "$BIN/postgres" -D "$PGDATA" -c listen_addresses='*'
"""


def version() -> str:
    return KATIB.version()


def tag(image: str) -> str:
    return f"{REPOSITORY}/{image}:{version()}"


def build_images() -> list[podman.BuiltImage]:
    """Katib's four images and the database's (each cached)."""
    bin_dir = ensure(KATIB)
    built = [
        podman.program_image(bin_dir / program, tag(image), workdir=workdir)
        for image, (program, workdir) in PROGRAMS.items()
    ]
    return [*built, postgres_image()]


def postgres_image() -> podman.BuiltImage:
    """Debian's PostgreSQL on a debootstrapped bookworm, started the way the official image is."""
    digest = hashlib.sha256(f"katib-postgres v1\0{POSTGRES_PACKAGES}\0".encode())
    digest.update(POSTGRES_ENTRYPOINT.encode())

    def run_build() -> None:
        with tempfile.TemporaryDirectory(dir=podman_store.images_dir(), prefix="postgres-") as tmp:
            rootfs, rootfs_tar = Path(tmp) / "rootfs", Path(tmp) / "rootfs.tar"
            debian_base.debootstrap(rootfs, POSTGRES_PACKAGES, "debootstrap-postgres")
            entry = rootfs / "usr/local/bin/postgres-entrypoint"
            entry.write_text(POSTGRES_ENTRYPOINT)
            entry.chmod(0o755)
            debian_base.tar_rootfs(rootfs, rootfs_tar)
            podman_store.run(
                "import", "--change", "ENV PATH=/usr/local/bin:/usr/bin:/bin",
                "--change", "ENV LANG=C.UTF-8",
                "--change", 'ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]',
                str(rootfs_tar), POSTGRES,
            )  # fmt: skip

    with podman_store.locked():
        built = podman.stamped_build("katib-postgres", digest.hexdigest(), POSTGRES, run_build)
        return podman.BuiltImage((POSTGRES,), built, docker_archive.archive(built))


def manifests(cluster: TargetCluster) -> list[dict[str, Any]]:
    """Katib's standalone PostgreSQL install, as `kubectl kustomize` renders it from the module."""
    rendered = cluster.kubectl("kustomize", str(module_source(KATIB, INSTALL))).stdout
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def adapt(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Katib's manifests as the bed installs them. Changed, and nothing else:
    - the UI's objects left out;
    - images never pulled (no registry is reachable), the database's image the bed's;
    - katib-config: `TRIAL_RESOURCES` added (as docs/katib.md says), and the algorithms the
      goptuna service serves sent to it."""
    out = []
    for doc in copy.deepcopy(docs):
        meta = doc["metadata"]
        if UI in meta["name"]:
            continue
        if doc["kind"] == "Deployment":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                if container["name"] == "katib-postgres":
                    container["image"] = POSTGRES
                container["imagePullPolicy"] = "Never"
        if doc["kind"] == "ConfigMap" and meta["name"] == "katib-config":
            doc["data"]["katib-config.yaml"] = _config(doc["data"]["katib-config.yaml"])
        out.append(doc)
    return out


def _config(text: str) -> str:
    config = yaml.safe_load(text)
    resources = config["init"]["controller"].setdefault("trialResources", [])
    resources += [r for r in TRIAL_RESOURCES if r not in resources]
    suggestions = config["runtime"]["suggestions"]
    for entry in suggestions:
        if entry["algorithmName"] in GOPTUNA_ALGORITHMS:
            entry["image"] = tag("suggestion-goptuna")
    named = {entry["algorithmName"] for entry in suggestions}
    suggestions += [
        {"algorithmName": name, "image": tag("suggestion-goptuna")}
        for name in GOPTUNA_ALGORITHMS
        if name not in named
    ]
    return yaml.safe_dump(config, sort_keys=False)


def install(cluster: TargetCluster, timeout: float = 300) -> None:
    """Katib built, its images on the node, its manifests applied; returns once its webhooks
    answer (Katib's controller writes their certificate at start)."""
    built = build_images()
    if cluster.node is not None:
        cluster.node.import_images([b.archive for b in built])
    docs = adapt(manifests(cluster))
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-",
                    input=yaml.safe_dump_all(docs))  # fmt: skip
    for deployment in ("katib-postgres", "katib-db-manager", "katib-controller"):
        cluster.kubectl("rollout", "status", "deployment", deployment, "-n", NAMESPACE,
                        f"--timeout={timeout:.0f}s")  # fmt: skip
    # An Experiment without a trial template: refused by Katib's validator once it answers.
    probe = yaml.safe_dump({
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "Experiment",
        "metadata": {"name": "webhook-probe", "namespace": NAMESPACE},
        "spec": {"objective": {"type": "minimize", "objectiveMetricName": "loss"},
                 "algorithm": {"algorithmName": "random"}},
    })  # fmt: skip

    def answers() -> bool:
        done = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=probe, check=False)
        return "denied the request" in done.stderr

    wait_for(answers, timeout, "Katib's webhook to answer")


def uninstall(cluster: TargetCluster, timeout: float = 300) -> None:
    """Every Experiment, Trial and Suggestion deleted while Katib's controller still takes their
    finalizers off (those it keeps are let go), then Katib's objects (webhooks, CRDs,
    namespace)."""
    kinds = list(CRDS)
    if cluster.get("crd", CRDS[0]):
        delete_all(cluster, kinds, 120)
    docs = adapt(manifests(cluster))
    cluster.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-",
                    input=yaml.safe_dump_all(docs), check=False)  # fmt: skip

    def gone() -> bool:
        let_go(cluster, kinds)  # a Trial its controller made while going
        crds = cluster.kubectl("get", "crd", "-o", "name", check=False).stdout.split()
        left = [c for c in crds if c.rsplit("/", 1)[-1] in CRDS]
        return not left and not cluster.get("namespace", NAMESPACE)

    wait_for(gone, timeout, "Katib's CRDs and namespace gone", interval=1)


def main() -> int:
    return podman.build_command(build_images)


if __name__ == "__main__":
    sys.exit(main())
