"""Kueue's MultiKueue in the bed: clusters that queue only, and the objects that join them.

A MultiKueue manager cluster runs no pod of a dispatched job, and a worker that never has
quota for one runs none either: such a cluster is a control plane (etcd, kube-apiserver,
kube-controller-manager on this host) with Kueue's manager beside it as one of its processes,
built from the same Go module as the node's Kueue (`kueue.py`). Two of them and the real node
fit 2 cores, where Kueue's own e2e runs three kind clusters. Kueue is set up from its own chart,
rendered by helm: its CRDs and webhook configurations applied, each webhook (and the CRDs'
conversion) pointed at the manager on 127.0.0.1 with a certificate of the plane's CA, as
controller-runtime's envtest does for Kueue's integration tests; its configuration is the
node's plus what the process needs (no leader election, no internal certificates, no
visibility API server, loopback ports).

Also the MultiKueue objects a manager needs, as Kueue's docs write them: the worker's
kubeconfig Secret, a MultiKueueCluster per worker, the MultiKueueConfig and the AdmissionCheck.
"""

from __future__ import annotations

import base64
import os
import tempfile
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tfjob_testbed.addons import kueue_install
from tfjob_testbed.addons.target import TargetCluster
from tfjob_testbed.controlplane.errors import log_tail
from tfjob_testbed.controlplane.plane import ControlPlane
from tfjob_testbed.core.gobuild import KUEUE, ensure
from tfjob_testbed.core.kube import Kubectl, wait_for
from tfjob_testbed.core.procs import alive, free_ports
from tfjob_testbed.core.tools import ensure_tools

CONTROLLER = "kueue.x-k8s.io/multikueue"
# Kueue's kinds whose documents a process-run Kueue needs from its chart: the rest (its
# Deployment, Services, RBAC, certificates, visibility APIServices) serve a pod.
KEPT = (
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
)
# What docs/production.md ("Many clusters with MultiKueue") tells users to add on a manager.
EXTERNAL_FRAMEWORKS = [{"name": name} for name in kueue_install.EXTERNAL_FRAMEWORKS]


def manager_configuration() -> dict[str, Any]:
    """What a MultiKueue manager's Kueue adds to its configuration: the TFJobs of both groups
    its generic adapter dispatches, and no built-in integration but Kubernetes' Job (Kueue's
    default when none is listed): MultiKueue watches each one's kind on each worker, and takes
    a worker whose API lacks one, or whose identity may not watch it, for not connected (the
    chart's worker identity may watch TFJobs and Jobs)."""
    integrations = kueue_install.configuration()["integrations"]
    return {
        "integrations": {**integrations, "frameworks": ["batch/job"]},
        "multiKueue": {"externalFrameworks": EXTERNAL_FRAMEWORKS},
    }


def process_configuration(
    extra: dict[str, Any], webhook_port: int, health_port: int, certs: Path
) -> dict[str, Any]:
    """Kueue's configuration as the node's (`kueue.configuration`) plus `extra`, for a manager
    run as a process: its webhook on 127.0.0.1 with the plane's certificate, probes on
    loopback, no metrics endpoint, no leader election, its certificates not its own to make."""
    return kueue_install.configuration(
        {
            **extra,
            "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(certs)},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
            "metrics": {"bindAddress": "0"},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
        }
    )


def _client_config(config: dict[str, Any], url: str, ca: bytes) -> dict[str, Any]:
    """A webhook's clientConfig pointed at `url` instead of Kueue's Service."""
    path = (config.get("service") or {}).get("path", "")
    return {"url": f"{url}{path}", "caBundle": base64.b64encode(ca).decode()}


def adapt(documents: list[dict[str, Any]], url: str, ca: bytes) -> list[dict[str, Any]]:
    """The chart's documents a process-run Kueue needs (`KEPT`), each webhook and each CRD's
    conversion webhook calling `url` (the manager's webhook server) trusted by `ca`."""
    kept = []
    for doc in documents:
        if not doc or doc.get("kind") not in KEPT:
            continue
        for hook in doc.get("webhooks") or []:
            hook["clientConfig"] = _client_config(hook["clientConfig"], url, ca)
        conversion = (doc.get("spec") or {}).get("conversion") or {}
        hook = conversion.get("webhook") or {}
        if "clientConfig" in hook:
            hook["clientConfig"] = _client_config(hook["clientConfig"], url, ca)
        kept.append(doc)
    return kept


def _rendered(cluster: TargetCluster, extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Kueue's chart rendered with the node's values (`kueue.chart_values`)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values:
        yaml.safe_dump(kueue_install.chart_values(extra), values)
        values.flush()
        out = cluster.helm(
            "template", kueue_install.RELEASE, str(kueue_install.chart()),
            "--namespace", kueue_install.NAMESPACE,
            "--values", values.name,
        ).stdout  # fmt: skip
    return [d for d in yaml.safe_load_all(out) if d]


def run_kueue(
    plane: ControlPlane, cluster: TargetCluster, extra: dict[str, Any], timeout: float = 120
) -> None:
    """Kueue's manager as a process of `plane` (`cluster` is kubectl and helm on it), with the
    node's configuration plus `extra`; returns once its webhooks admit an object."""
    webhook_port, health_port = free_ports(2)
    certs = plane.workdir / "kueue-certs"
    certs.mkdir(exist_ok=True)
    crt, key = plane.serving_cert("kueue-webhook", ["IP:127.0.0.1"])
    os.replace(crt, certs / "tls.crt")
    os.replace(key, certs / "tls.key")
    config = plane.workdir / "kueue-config.yaml"
    config.write_text(
        yaml.safe_dump(process_configuration(extra, webhook_port, health_port, certs))
    )
    docs = adapt(
        _rendered(cluster, extra), f"https://127.0.0.1:{webhook_port}", plane.ca.read_bytes()
    )
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(crds))
    kubectl = Kubectl(ensure_tools().kubectl, plane.kubeconfig)
    kubectl.wait_established(*(d["metadata"]["name"] for d in crds), timeout=timeout)
    cluster.kubectl("create", "namespace", kueue_install.NAMESPACE, check=False)
    manager = [
        str(ensure(KUEUE) / "manager"),
        f"--config={config}",
        # Its on-demand visibility API would want a port of its own on this host (8082).
        "--feature-gates=VisibilityOnDemand=false",
    ]
    plane.spawn(
        "kueue",
        metrics_certs_argv(plane.workdir / "kueue-etc", certs, manager),
        env={**os.environ, "KUBECONFIG": str(plane.kubeconfig)},
    )
    hooks = [d for d in docs if d["kind"] != "CustomResourceDefinition"]
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump_all(hooks))
    probe = yaml.safe_dump(kueue_install.flavor("webhook-probe", {}))
    pid = plane.processes()["kueue"]

    def answers() -> bool:
        if not alive(pid):
            raise AssertionError(f"Kueue exited:\n{log_tail(plane.workdir / 'kueue.log')}")
        made = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=probe, check=False)
        return made.returncode == 0

    wait_for(answers, timeout, "Kueue's webhook (a process of the plane) to answer")


def restart_kueue(plane: ControlPlane, extra: dict[str, Any], timeout: float = 120) -> None:
    """Kueue's manager started again with the node's configuration plus `extra` (its
    webhooks and certificates as they are); returns once it answers its readiness probe."""
    config = plane.workdir / "kueue-config.yaml"
    old = yaml.safe_load(config.read_text())
    plane.stop_process("kueue")
    config.write_text(
        yaml.safe_dump(
            process_configuration(
                extra,
                old["webhook"]["port"],
                int(old["health"]["healthProbeBindAddress"].rsplit(":", 1)[1]),
                Path(old["webhook"]["certDir"]),
            )
        )
    )
    plane.start_process("kueue")
    ready = f"http://{old['health']['healthProbeBindAddress']}/readyz"
    wait_for(lambda: _answers(ready), timeout, "Kueue ready again")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def metrics_certs_argv(layer: Path, certs: Path, argv: list[str]) -> list[str]:
    """`argv` run where Kueue finds its metrics certificates: without its internal
    certificates, Kueue reads them from /etc/kueue/metrics/certs whatever its configuration
    says. A mount namespace of its own lays a directory over the host's /etc that holds
    them (the plane's webhook certificate), and this host's /etc stays as it is."""
    upper, work = layer / "upper", layer / "work"
    target = upper / "kueue" / "metrics" / "certs"
    target.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        (target / name).write_bytes((certs / name).read_bytes())
    overlay = f"lowerdir=/etc,upperdir={upper},workdir={work}"
    script = f'mount -t overlay overlay -o {overlay} /etc && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv]


def kubeconfig_secret(name: str, kubeconfig: str) -> dict[str, Any]:
    """A worker's kubeconfig where Kueue reads it: a Secret in its namespace, key `kubeconfig`
    (the certificates embedded; no file, no exec plugin)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": kueue_install.NAMESPACE},
        "stringData": {"kubeconfig": kubeconfig},
    }


def worker(name: str, secret: str) -> dict[str, Any]:
    """A MultiKueueCluster: a worker reached through the kubeconfig in `secret`."""
    source = {"kubeConfig": {"location": secret, "locationType": "Secret"}}
    return kueue_install.kueue_object("MultiKueueCluster", name, {"clusterSource": source})


def config(name: str, clusters: list[str]) -> dict[str, Any]:
    return kueue_install.kueue_object("MultiKueueConfig", name, {"clusters": clusters})


def admission_check(name: str, config_name: str) -> dict[str, Any]:
    """The AdmissionCheck a ClusterQueue names to dispatch its Workloads to the workers."""
    parameters = {"apiGroup": kueue_install.GROUP, "kind": "MultiKueueConfig", "name": config_name}
    return kueue_install.kueue_object(
        "AdmissionCheck", name, {"controllerName": CONTROLLER, "parameters": parameters}
    )
