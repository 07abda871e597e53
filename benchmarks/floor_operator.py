"""The leanest kopf operator on the operator's TFJob events: the floor under its cost, run by
`kopf run` for benchmarks/kopf_floor.py.

FLOOR_MODE=empty: an empty handler that only notes when each job's first event came (a line
`name monotonic-time` in FLOOR_LOG), kopf's own cost. FLOOR_MODE=children: the same handler
also creates the job's children (the operator's own pure functions build them) with the
Kubernetes client's `ApiClient`, by path as the operator sends its requests (controller/rest.py;
the client's typed classes are not loaded): kopf and the client. FLOOR_MODE=apply: the same,
by server-side apply with the operator's field manager, as the operator sends its children.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

import kopf
import kubernetes

from tfjob_operator.api.spec import GROUP, PLURAL, VERSION, parse_spec
from tfjob_operator.controller import rest
from tfjob_operator.controller.client import CHILD_KINDS
from tfjob_operator.controller.rest import APPLY
from tfjob_operator.rules.children import JobRef, desired_children
from tfjob_operator.rules.naming import FIELD_MANAGER

MODE = os.environ.get("FLOOR_MODE", "empty")
_seen: set[str] = set()
_lock = threading.Lock()
_out = open(os.environ.get("FLOOR_LOG", os.devnull), "a", buffering=1)  # noqa: SIM115


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """The operator's own watch settings; no Events, no progress kept on the objects."""
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.chunk_size = 500
    kubernetes.config.load_kube_config()
    memo.rest = rest.Rest(kubernetes.client.ApiClient())


@kopf.on.event(GROUP, VERSION, PLURAL)
def job_event(
    type: str | None, body: kopf.Body, name: str, namespace: str, memo: kopf.Memo, **_: Any
) -> None:
    if type not in (None, "ADDED"):
        return
    with _lock:
        if name in _seen:
            return
        _seen.add(name)
    if MODE in ("children", "apply"):
        ref = JobRef(name, namespace, body["metadata"]["uid"])
        for obj in desired_children(ref, parse_spec(dict(body["spec"])), "cluster.local"):
            group, plural = CHILD_KINDS[obj["kind"]]
            where = rest.path(group, "v1", plural, namespace)
            if MODE == "apply":
                memo.rest.request(
                    "PATCH",
                    f"{where}/{obj['metadata']['name']}",
                    query={"fieldManager": FIELD_MANAGER, "force": True},
                    body=obj,
                    content_type=APPLY,
                )
                continue
            try:
                memo.rest.request("POST", where, body=obj)
            except kubernetes.client.ApiException as e:
                if e.status != 409:  # made already: a handler run twice
                    raise
    _out.write(f"{name} {time.monotonic()}\n")
