"""Kubeflow's training-operator (the v1 TFJob controller) as its own process: the peer that
`benchmarks/operator_scale.py` measures the operator beside.

Built from its Go module (`tfjob_testbed.core.gobuild.TRAINING_OPERATOR`); its TFJob CRD is read
from the same module, as its manifests install it. It runs with only the TFJob controller, no
gang scheduler, watching one namespace.

Its webhooks: v1.9 has no flag to run without them. At start it rotates a webhook certificate
into a Secret (`<system namespace>/training-operator-webhook-cert`, which must exist) and waits,
before it starts any controller, until that certificate is in its fixed `CERT_DIR` (in a cluster
the kubelet mounts the Secret there) and the CA has been put into its
ValidatingWebhookConfiguration. Here the Secret is made empty, the rotator fills it, and
`start` writes its certificate to `CERT_DIR` as the kubelet's mount would. No
ValidatingWebhookConfiguration is installed: the rotator logs that it found none and goes on,
and the API server never calls the webhook (it could not reach it: its certificate names
`training-operator.<ns>.svc`, which nothing here serves). So its TFJobs are not validated at
admission; the controller defaults them itself, as it always does.
"""

from __future__ import annotations

import base64
import os
import subprocess
import urllib.request
from collections.abc import Sequence
from pathlib import Path

import yaml

from tfjob_testbed.core.gobuild import TRAINING_OPERATOR, ensure, module_source
from tfjob_testbed.core.kube import Kubectl, wait_for
from tfjob_testbed.core.procs import free_ports, terminate

CRD_FILE = "manifests/base/crds/kubeflow.org_tfjobs.yaml"
CRD_NAME = "tfjobs.kubeflow.org"
# Fixed in the peer's pkg/cert: where its webhook server reads its certificate.
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
WEBHOOK_SECRET = "training-operator-webhook-cert"
# Its requests carry client-go's default user agent, named after the binary.
USER_AGENT = "training-operator/"
# Logged by controller-runtime once the TFJob controller takes jobs.
STARTED = "Starting workers"


def version() -> str:
    return TRAINING_OPERATOR.version()


def crd_path() -> Path:
    """The peer's TFJob CRD, as its module ships it."""
    return module_source(TRAINING_OPERATOR, CRD_FILE)


def install_crd(kubectl: Kubectl) -> None:
    """Kubeflow's own `tfjobs.kubeflow.org`, established. Server-side: the CRD is too large for
    the last-applied annotation of a client-side apply."""
    kubectl("apply", "--server-side", "-f", str(crd_path()))
    kubectl.wait_established(CRD_NAME)


class PeerProcess:
    """training-operator against the cluster of `kubeconfig`, taking the TFJobs of `namespace`;
    healthy once its TFJob controller has started."""

    def __init__(
        self,
        kubectl: Kubectl,
        log: Path,
        namespace: str,
        args: Sequence[str] = (),
        system_namespace: str = "kubeflow",
    ) -> None:
        self.kubectl, self.log, self.namespace = kubectl, log, namespace
        self.args, self.system_namespace = list(args), system_namespace
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def argv(self, probe_port: int, webhook_port: int) -> list[str]:
        binary = ensure(TRAINING_OPERATOR) / "training-operator"
        return [
            str(binary),
            f"--kubeconfig={self.kubectl.kubeconfig}",
            "--enable-scheme=tfjob",
            f"--namespace={self.namespace}",
            "--gang-scheduler-name=",
            "--metrics-bind-address=0",
            f"--health-probe-bind-address=127.0.0.1:{probe_port}",
            f"--webhook-server-port={webhook_port}",
            "--zap-log-level=info",
            *self.args,
        ]

    def start(self, timeout: float = 90) -> None:
        probe_port, webhook_port = free_ports(2)
        argv = self.argv(probe_port, webhook_port)
        self._prepare_secret()
        for name in ("tls.crt", "tls.key"):
            (CERT_DIR / name).unlink(missing_ok=True)
        self.starts += 1
        out = open(self.log, "ab")  # noqa: SIM115 (the process owns it)
        out.write(f"\n===== start #{self.starts} =====\n".encode())
        out.flush()
        env = {**os.environ, "MY_POD_NAMESPACE": self.system_namespace}
        self.proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        start = self.log.stat().st_size
        wait_for(self._mount_certs, timeout, "training-operator's webhook certificate", 0.5)
        url = f"http://127.0.0.1:{probe_port}/readyz"

        def ready() -> bool:
            if self.proc is None or self.proc.poll() is not None:
                raise AssertionError(f"training-operator exited:\n{self.tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1) as r:
                    if r.status != 200:
                        return False
            except OSError:
                return False
            with self.log.open("rb") as f:
                f.seek(start)
                return STARTED.encode() in f.read()

        wait_for(ready, timeout, "training-operator ready with its TFJob controller", 0.5)

    def _prepare_secret(self) -> None:
        """The system namespace and the Secret the certificate rotator fills."""
        objects = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.system_namespace}},
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": WEBHOOK_SECRET, "namespace": self.system_namespace},
            },
        ]
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))

    def _mount_certs(self) -> bool:
        """The rotator's certificate from the Secret into CERT_DIR, once it is there."""
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"training-operator exited:\n{self.tail()}")
        secret = self.kubectl.get_json("secret", "-n", self.system_namespace, WEBHOOK_SECRET)
        data = secret.get("data") or {}
        if not data.get("tls.crt") or not data.get("tls.key"):
            return False
        CERT_DIR.mkdir(parents=True, exist_ok=True)
        for name in ("tls.key", "tls.crt"):  # the certificate last: the rotator looks for it
            path = CERT_DIR / name
            tmp = path.with_name(name + ".tmp")
            tmp.write_bytes(base64.b64decode(data[name]))
            tmp.chmod(0o600)
            tmp.rename(path)
        return True

    def stop(self) -> None:
        if self.proc:
            terminate(self.proc, 30)

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
