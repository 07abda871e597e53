"""The few API calls the operator makes besides kopf's watching: apply, patch status, delete.

Children are written with server-side apply under one field manager, so applying the same
desired objects twice changes nothing, and a conflict with another writer cannot stall us.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import kubernetes

from . import naming
from .api import GROUP, PLURAL, VERSION

# Every write below, as (API group, resource, verb): the RBAC rules must grant exactly these
# plus list/watch of what is watched (a test checks rbac.RULES against them).
WRITES = {
    ("", "services", "create"),
    ("", "services", "patch"),  # server-side apply may create
    ("apps", "statefulsets", "create"),
    ("apps", "statefulsets", "patch"),
    ("", "persistentvolumeclaims", "create"),
    (GROUP, f"{PLURAL}/status", "patch"),
    (GROUP, PLURAL, "delete"),
}
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"


def uses_kubeconfig() -> bool:
    """$KUBECONFIG first; the in-cluster service account only inside a pod without one."""
    return bool(os.environ.get("KUBECONFIG") or not os.environ.get("KUBERNETES_SERVICE_HOST"))


def configure_client() -> None:
    """Point the kubernetes client where a user expects: $KUBECONFIG first, else in-cluster."""
    if uses_kubeconfig():
        kubernetes.config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))
    else:
        kubernetes.config.load_incluster_config()


class Kube:
    """Typed API handles, created once per process."""

    def __init__(self) -> None:
        client = kubernetes.client.ApiClient()
        self.core = kubernetes.client.CoreV1Api(client)
        self.apps = kubernetes.client.AppsV1Api(client)
        self.custom = kubernetes.client.CustomObjectsApi(client)
        self._apply: dict[str, Callable[..., Any]] = {
            "Service": self.core.patch_namespaced_service,
            "StatefulSet": self.apps.patch_namespaced_stateful_set,
        }

    def apply(self, manifest: dict[str, Any]) -> None:
        """Server-side apply one child; creates it when missing.

        The response is not turned into client models: we do not need it, and that saves CPU.
        """
        meta = manifest["metadata"]
        if manifest["kind"] == "PersistentVolumeClaim":
            self._create_claim(manifest)
            return
        response = self._apply[manifest["kind"]](
            meta["name"],
            meta["namespace"],
            manifest,
            field_manager=naming.FIELD_MANAGER,
            force=True,
            _content_type=APPLY,
            _preload_content=False,
        )
        response.data  # noqa: B018  (read it, so the connection goes back to the pool)

    def _create_claim(self, manifest: dict[str, Any]) -> None:
        """Claims are created once and never changed: their spec is immutable once bound."""
        try:
            response = self.core.create_namespaced_persistent_volume_claim(
                manifest["metadata"]["namespace"],
                manifest,
                field_manager=naming.FIELD_MANAGER,
                _preload_content=False,
            )
            response.data  # noqa: B018
        except kubernetes.client.ApiException as e:
            if e.status != 409:
                raise

    def patch_status(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch the status subresource; return the object as stored."""
        return self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, {"status": patch}, _content_type=MERGE
        )

    def delete_job(self, namespace: str, name: str) -> None:
        """Delete a TFJob; the garbage collector removes its children."""
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, propagation_policy="Background"
            )
        except kubernetes.client.ApiException as e:
            if e.status != 404:
                raise
