"""Requests to the API server by path, through the kubernetes client's own `ApiClient`.

The operator sends a few kinds of request and reads their JSON as dicts. The client's typed
API classes (`CoreV1Api`, `AppsV1Api`, `CustomObjectsApi`, ...) and its model classes are
never imported: each is a module of hundreds of annotated methods, whose import alone is a
large share of the operator's memory (docs/performance.md), and whose calls validate their
arguments before every request. What the client does for a request
(the kubeconfig's host, TLS and credentials, the user agent, the connection pool) is kept:
`ApiClient.param_serialize` and `call_api` are the calls its typed methods make.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import kubernetes

JSON = "application/json"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# The credentials the client's own typed calls send (a bearer token, when the kubeconfig or the
# service account has one; client certificates go with the connection).
AUTH = ["BearerToken"]

Query = Mapping[str, str | int | bool | None]


def path(
    group: str,
    version: str,
    plural: str,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The path of a collection, of one object, or of its subresource: `/api/v1/...` for the
    core group, `/apis/<group>/<version>/...` for the others."""
    parts = ["/api/v1" if group == "" else f"/apis/{group}/{version}"]
    if namespace is not None:
        parts += ["namespaces", quote(namespace, safe="")]
    parts.append(plural)
    if name is not None:
        parts.append(quote(name, safe=""))
    if subresource is not None:
        parts.append(subresource)
    return "/".join(parts)


def query_pairs(query: Query | None) -> list[tuple[str, str]]:
    """Query parameters as the API server reads them: booleans lower-case, None left out."""
    pairs = []
    for key, value in (query or {}).items():
        if value is None:
            continue
        pairs.append((key, str(value).lower() if isinstance(value, bool) else str(value)))
    return pairs


class Rest:
    """One `ApiClient` (its connection pool, its user agent), spoken to by path."""

    def __init__(self, client: kubernetes.client.ApiClient) -> None:
        self.client = client

    def request(
        self,
        method: str,
        url_path: str,
        *,
        query: Query | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout: float | None = None,
    ) -> bytes:
        """Send one request; its response body, read in full (the connection goes back to the
        pool). A status outside 2xx raises the client's own `ApiException` (404, 409, ...)."""
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        serialized = self.client.param_serialize(
            method,
            url_path,
            query_params=query_pairs(query),
            header_params=headers,
            body=body,
            auth_settings=AUTH,
        )
        response = self.client.call_api(*serialized, _request_timeout=timeout)
        response.read()
        if not 200 <= response.status <= 299:
            raise kubernetes.client.ApiException.from_response(
                http_resp=response, body=None, data=None
            )
        data: bytes = response.data or b""
        return data

    def get(
        self, url_path: str, *, query: Query | None = None, timeout: float | None = None
    ) -> Any:
        """GET, its JSON decoded."""
        return json.loads(self.request("GET", url_path, query=query, timeout=timeout))
