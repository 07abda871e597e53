"""TFJob bodies and pod objects for tests: small builders, real shapes."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from tfjob_operator.api.spec import API_VERSION, KIND
from tfjob_testbed.core.paths import ROOT

EXAMPLES = ROOT / "manifests" / "examples"


def example(file: str, name: str, extra_args: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """A shipped example (`manifests/examples/<file>.yaml`) renamed, with arguments appended to
    every container's (the trainer takes the last value of a repeated flag)."""
    job: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{file}.yaml").read_text())
    job["metadata"]["name"] = name
    for rs in job["spec"]["tfReplicaSpecs"].values():
        for c in rs["template"]["spec"]["containers"]:
            c["args"] = [*c.get("args", []), *extra_args]
    return job


def template(
    image: str = "python:3.11", command: list[str] | None = None, **container: Any
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "tensorflow", "image": image, **container}
    if command is not None:
        c["command"] = command
    return {"spec": {"containers": [c]}}


def tfjob(
    name: str = "mnist",
    namespace: str = "default",
    replicas: dict[str, int] | None = None,
    restart_policy: str = "Never",
    policies: dict[str, str] | None = None,
    run_policy: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    uid: str = "uid-1",
    **spec: Any,
) -> dict[str, Any]:
    replicas = replicas if replicas is not None else {"PS": 1, "Worker": 2}
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {
            "tfReplicaSpecs": {
                rt: {
                    "replicas": n,
                    "restartPolicy": (policies or {}).get(rt, restart_policy),
                    "template": template(),
                }
                for rt, n in replicas.items()
            },
            **spec,
        },
    }
    if run_policy:
        body["spec"]["runPolicy"] = run_policy
    if status is not None:
        body["status"] = copy.deepcopy(status)
    return body


def pod(
    job: str,
    rt: str,
    index: int,
    *,
    uid: str | None = None,
    namespace: str = "default",
    phase: str = "Running",
    finalizers: list[str] | None = None,
    **container: Any,
) -> dict[str, Any]:
    """A pod of a job as the kubelet would report it; `container` goes to `container_status`."""
    name = f"{job}-{rt}-{index}"
    cs = container_status(**container)
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{name}",
        "labels": {
            "tfjob.dev/job-name": job,
            "tfjob.dev/replica-type": rt,
            "app.kubernetes.io/managed-by": "tfjob-operator",
        },
    }
    if finalizers:
        meta["finalizers"] = list(finalizers)
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "tensorflow", "image": "x"}]},
        "status": {"phase": phase, "containerStatuses": [cs]},
    }


def kubelet_restarts(container: dict[str, Any], code: int) -> bool:
    """Whether a kubelet starts a container of a StatefulSet's pod (`restartPolicy: Always`)
    again after it exits with `code`, as Kubernetes reads the container's own restartPolicy
    and restartPolicyRules: the first rule that matches decides, else the policy."""
    for rule in container.get("restartPolicyRules") or []:
        codes = rule["exitCodes"]
        if (code in codes.get("values", [])) == (codes["operator"] == "In"):
            return bool(rule["action"] == "Restart")
    policy = container.get("restartPolicy", "Always")
    return policy == "Always" or (policy == "OnFailure" and code != 0)


def container_status(
    state: str = "running",
    exit_code: int | None = None,
    reason: str = "",
    last_exit: int | None = None,
    last_reason: str = "",
    restarts: int = 0,
    message: str = "",
) -> dict[str, Any]:
    """The 'tensorflow' container's status as a kubelet reports it.

    `state` is running, waiting (`reason`, CrashLoopBackOff unless given) or terminated (with
    `exit_code`); `last_exit` fills lastState.terminated.
    """
    at = "2026-01-01T00:00:00Z"

    def terminated(code: int | None, why: str) -> dict[str, Any]:
        why = why or ("Completed" if code == 0 else "Error")
        return {"terminated": {"exitCode": code, "reason": why, "startedAt": at, "finishedAt": at}}

    cs: dict[str, Any] = {
        "name": "tensorflow",
        "image": "tfjob/test",
        "imageID": "",
        "ready": state == "running",
        "started": state == "running",
        "restartCount": restarts,
        "lastState": {} if last_exit is None else terminated(last_exit, last_reason),
    }
    if state == "running":
        cs["state"] = {"running": {"startedAt": at}}
    elif state == "waiting":
        cs["state"] = {"waiting": {"reason": reason or "CrashLoopBackOff", "message": message}}
    else:
        cs["state"] = terminated(exit_code, reason)
    return cs
