"""Test-side helpers for a real API server: kubectl as a user runs it, waiting with deadlines,
and playing the kubelet (there is none) by writing pod status."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import kubernetes
import yaml

from tfjob_testbed.core.jobs import container_status

T = TypeVar("T")


def wait_for(check: Callable[[], T], timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll `check` until it returns something truthy; fail with `what` after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            answer = check()
            last = answer
            if answer:
                return answer
        except kubernetes.client.ApiException as e:
            last = f"{e.status} {e.reason}"
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


class Kubectl:
    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary, self.kubeconfig = binary, kubeconfig

    def run(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(self.binary), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def __call__(self, *args: str, input: str | None = None) -> str:
        return self.run(*args, input=input).stdout

    def apply(self, obj: dict[str, Any] | str, namespace: str | None = None) -> str:
        text = obj if isinstance(obj, str) else yaml.safe_dump(obj)
        ns = ["-n", namespace] if namespace else []
        return self("apply", *ns, "-f", "-", input=text)

    def get_json(self, *args: str) -> Any:
        return json.loads(self("get", *args, "-o", "json"))

    def wait_established(self, *crds: str, timeout: float = 60) -> None:
        """Until the CRDs (names, or every one when none is named) are Established. Not
        `kubectl wait`: it has failed outright on a CRD just created whose status had no
        conditions yet (kubectl 1.35 against a 1.37 API server, under load)."""

        def established() -> bool:
            found = self.get_json("crd", *crds)
            items = found.get("items", [found])
            return bool(items) and all(
                any(
                    c.get("type") == "Established" and c.get("status") == "True"
                    for c in (item.get("status") or {}).get("conditions") or []
                )
                for item in items
            )

        wait_for(established, timeout, f"CRDs {' '.join(crds) or '(all)'} established")


class Kubelet:
    """Writes container statuses the way a kubelet would, for pods that never really run."""

    def __init__(self, core: kubernetes.client.CoreV1Api, namespace: str) -> None:
        self.core, self.namespace = core, namespace

    def set(self, pod: str, phase: str = "Running", **container: Any) -> None:
        """Report the pod's container as `container_status(**container)` describes it, and the
        pod's `phase` (Succeeded or Failed: its container stays down, by its restart rules)."""
        cs = container_status(**container)
        body = {"status": {"phase": phase, "podIP": "10.0.0.1", "containerStatuses": [cs]}}
        self.core.patch_namespaced_pod_status(pod, self.namespace, body)

    def run_all(self, pods: list[str]) -> None:
        for p in pods:
            self.set(p)


def service_account_kubeconfig(
    kubectl: Kubectl, admin: Path, namespace: str, account: str, path: Path
) -> Path:
    """A kubeconfig that authenticates as a ServiceAccount, with a token from the TokenRequest
    API (as `kubectl create token` makes one), against the cluster of the `admin` kubeconfig."""
    token = kubectl.run("create", "token", account, "-n", namespace, "--duration=24h").stdout
    token = token.strip()
    cluster = json.loads(admin.read_text())["clusters"][0]["cluster"]
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "plane", "cluster": cluster}],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [{"name": account, "context": {"cluster": "plane", "user": account}}],
                "current-context": account,
            }
        )
    )
    return path
