"""`tfjob submit | logs | get | scale | tensorboard | delete`: TFJobs on a cluster, with the look
of `tfjob run`: replica-prefixed logs, the same summary, an exit code that says how it went. Each
command is a module of its own (submit.py, get.py, logs.py, scale.py, delete.py,
tensorboard_forward.py); this one is what they share.

It connects as kubectl does: $KUBECONFIG (or ~/.kube/config) with its current context, or
`--context`; in a pod, the service account. Every failure is one line on stderr and exit 1
(2 for a file or spec that cannot be used): `CliError`, raised by `Connection.call` for a failed
API call.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import urllib3

from tfjob_operator.api.spec import GROUP, KIND, PLURAL, VERSION, ReplicaType
from tfjob_operator.rules import naming

EXIT_FAILED, EXIT_USAGE = 1, 2


class CliError(Exception):
    """One line for the user; the command exits with `code`."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Connection:
    """API handles and the namespace, chosen the way kubectl chooses them."""

    core: kubernetes.client.CoreV1Api
    custom: kubernetes.client.CustomObjectsApi
    namespace: str
    server: str
    group: str = GROUP  # the TFJobs' API group, as the operator serves it

    @classmethod
    def connect(cls, namespace: str | None, context: str | None, group: str = GROUP) -> Connection:
        paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
        if paths and not any(Path(p).exists() for p in paths):
            raise CliError(f"no cluster: KUBECONFIG names no file ({os.environ['KUBECONFIG']})")
        try:
            if paths or Path("~/.kube/config").expanduser().exists():
                client = kubernetes.config.new_client_from_config(context=context)
                _, active = kubernetes.config.list_kube_config_contexts()
                if context:
                    contexts, _ = kubernetes.config.list_kube_config_contexts()
                    active = next((c for c in contexts if c["name"] == context), active)
                default_ns = (active.get("context") or {}).get("namespace") or "default"
            elif os.environ.get("KUBERNETES_SERVICE_HOST"):
                kubernetes.config.load_incluster_config()
                client = kubernetes.client.ApiClient()
                default_ns = (
                    Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                    .read_text()
                    .strip()
                )
            else:
                raise CliError("no cluster: set KUBECONFIG or create ~/.kube/config")
        except (kubernetes.config.ConfigException, OSError, ValueError) as e:
            raise CliError(f"cannot read the kubeconfig: {e}") from None
        return cls(
            kubernetes.client.CoreV1Api(client),
            kubernetes.client.CustomObjectsApi(client),
            namespace or default_ns,
            client.configuration.host,
            group,
        )

    def call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """An API call whose failures become one clear line."""
        try:
            return fn(*args, _request_timeout=kwargs.pop("_request_timeout", 30), **kwargs)
        except kubernetes.client.ApiException as e:
            raise self._refusal(what, e) from None
        except (urllib3.exceptions.HTTPError, OSError) as e:
            reason = getattr(e, "reason", None) or e
            raise CliError(f"cannot reach the cluster at {self.server}: {reason}") from None

    def _refusal(self, what: str, e: kubernetes.client.ApiException) -> CliError:
        try:
            body = json.loads(e.body or "{}")
        except ValueError:
            body = {}
        details = body.get("details") or {}
        if e.status == 404 and not details.get("name"):
            return CliError(
                f"the {KIND} CRD ({PLURAL}.{self.group}) is not installed on this cluster; "
                f"install it: kubectl apply -f {_crd_manifest(self.group)} (or helm install the "
                "chart)"
            )
        if e.status == 404:
            return CliError(f"{KIND} {self.namespace}/{details['name']} not found")
        return CliError(f"cannot {what}: {body.get('message') or e.reason}")

    def job(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.call(
            f"read {KIND} {name}",
            self.custom.get_namespaced_custom_object,
            self.group,
            VERSION,
            self.namespace,
            PLURAL,
            name,
        )
        return found

    def pods(self, job: str) -> list[Any]:
        """The job's replica pods (not its TensorBoard), in replica order."""
        items = self.call(
            "list pods",
            self.core.list_namespaced_pod,
            self.namespace,
            label_selector=f"{naming.LABEL_JOB_NAME}={job},{naming.LABEL_REPLICA_TYPE}",
        ).items
        return sorted(items, key=lambda p: replica_key(p.metadata.name, job))


def replica_of(pod: str, job: str) -> str:
    """`worker-1` for the pod `mnist-worker-1` of the job `mnist`."""
    return pod.removeprefix(f"{job}-")


def replica_key(pod: str, job: str) -> tuple[int, int, str]:
    rt, _, index = replica_of(pod, job).rpartition("-")
    order = [t.task_type for t in ReplicaType]
    return (order.index(rt) if rt in order else len(order), int(index or 0), pod)


def _crd_manifest(group: str) -> str:
    return "manifests/kubeflow/crd.yaml" if group != GROUP else "manifests/crd.yaml"
