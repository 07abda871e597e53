"""Kubernetes objects as the node services hold them: the API's JSON as plain dicts (`Obj`),
known by namespace and name (`Key`, `key_of`). The DNS records, the volume provisioner and the
list-and-watch threads all read objects this way, so none of them needs the client's models."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = dict[str, Any]
Key = tuple[str, str]


def key_of(obj: Mapping[str, Any]) -> Key:
    """(namespace, name); namespace is "" for cluster-scoped objects."""
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""
