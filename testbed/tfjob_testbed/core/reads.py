"""What the node tests read from a cluster, through one API client instead of a `kubectl`
process a read: the waits poll every fraction of a second beside pods that train on the same
two cores. `Reads.get` takes `kubectl get`'s arguments and answers with the JSON `kubectl get
-o json` prints; what it does not take (another flag, an ambiguous kind) it leaves to kubectl."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import urllib3

from tfjob_operator.controller.rest import Rest, path

# `kubectl get` flags with a value, as the API's list parameters.
_QUERY = {
    "-l": "labelSelector",
    "--selector": "labelSelector",
    "--field-selector": "fieldSelector",
}
_TIMEOUT = 30


class ReadError(Exception):
    """The API server did not answer a read (it may be down): as a failed `kubectl get`."""


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None, name: str | None) -> str:
        where = namespace if self.namespaced else None
        return path(self.group, self.version, self.plural, where, name)


@dataclass(frozen=True)
class Query:
    """One `kubectl get`: the resource's name as typed, the object's name, where, and filters."""

    kind: str
    name: str | None
    namespace: str | None
    params: tuple[tuple[str, str], ...]  # at most one of each, as kubectl takes them


def parse(args: tuple[str, ...], default_namespace: str = "default") -> Query | None:
    """`kubectl get`'s arguments as a Query; None for what only kubectl answers."""
    positional: list[str] = []
    namespace: str | None = default_namespace
    params: list[tuple[str, str]] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        flag, eq, value = arg.partition("=")
        if flag in ("-n", "--namespace", *_QUERY):
            if not eq:
                if not rest:
                    return None
                value = rest.pop(0)
            if flag in _QUERY:
                params.append((_QUERY[flag], value))
            else:
                namespace = value
        elif arg in ("-A", "--all-namespaces"):
            namespace = None
        elif arg.startswith("-"):
            return None
        else:
            positional.append(arg)
    if len(positional) == 1 and "/" in positional[0]:
        positional = positional[0].split("/", 1)
    if not positional or len(positional) > 2 or "," in positional[0]:
        return None
    name = positional[1] if len(positional) == 2 else None
    return Query(positional[0].lower(), name, namespace, tuple(params))


def names_of(group: str, resource: dict[str, Any]) -> set[str]:
    """The names kubectl takes for a resource: plural, singular, kind, short names, each also
    qualified by its group."""
    plain = {resource["name"], resource.get("singularName") or "", resource["kind"].lower()}
    plain |= set(resource.get("shortNames") or ())
    plain.discard("")
    return plain | {f"{n}.{group}" for n in plain if group}


class Reads:
    """Reads through one API client, its discovery refreshed when a name is not found in it."""

    def __init__(self, kubeconfig: Path) -> None:
        # The operator's own way to the API server by path (its client, its JSON as dicts).
        self.rest = Rest(kubernetes.config.new_client_from_config(config_file=str(kubeconfig)))
        self._lock = threading.Lock()
        self._resources: dict[str, list[Resource]] = {}
        self._discovered = -math.inf  # when, on the monotonic clock

    def get(self, *args: str) -> dict[str, Any] | None:
        """`kubectl get ARGS -o json`: the object or list; {} when the object does not exist;
        None where kubectl must answer."""
        query = parse(args)
        if query is None:
            return None
        resource = self._resolve(query.kind)
        if resource is None:
            return None
        url = resource.path(query.namespace, query.name)
        try:
            found = self._json(url, list(query.params))
        except kubernetes.client.ApiException as e:
            if e.status != 404:
                raise ReadError(f"GET {url}: {e.status} {e.reason}") from e
            return {} if query.name else None
        # The API server leaves a list's items without their kind and apiVersion; kubectl
        # writes them in.
        if query.name is None:
            for item in found.get("items") or ():
                item.setdefault("kind", resource.kind)
                item.setdefault("apiVersion", resource.api_version)
        return found

    def logs(self, pod: str, namespace: str) -> str:
        """`kubectl logs`: the pod's log, "" while it cannot be read."""
        url = path("", "v1", "pods", namespace, pod, "log")
        try:
            return self.rest.request("GET", url, timeout=_TIMEOUT).decode(errors="replace")
        except (kubernetes.client.ApiException, urllib3.exceptions.HTTPError):
            return ""

    def _json(self, url: str, query: list[tuple[str, str]]) -> dict[str, Any]:
        try:
            body: dict[str, Any] = self.rest.get(url, query=dict(query), timeout=_TIMEOUT)
        except urllib3.exceptions.HTTPError as e:
            raise ReadError(f"GET {url}: {e}") from e
        return body

    def _resolve(self, kind: str) -> Resource | None:
        """The one resource the name stands for, the core group's first (`events`); None if
        none, or several of other groups (kubectl decides)."""
        with self._lock:
            # A name not served yet (a CRD about to be installed) asks again at most each second.
            if kind not in self._resources and time.monotonic() - self._discovered > 1:
                self._discover()
            found = self._resources.get(kind, [])
        core = [r for r in found if not r.group]
        return core[0] if core else found[0] if len(found) == 1 else None

    def _discover(self) -> None:
        resources: dict[str, list[Resource]] = {}
        versions = [("", "v1", "/api/v1")]
        for group in self._json("/apis", [])["groups"]:
            preferred = group["preferredVersion"]["version"]
            versions.append((group["name"], preferred, f"/apis/{group['name']}/{preferred}"))
        for group, version, url in versions:
            try:
                listed = self._json(url, [])["resources"]
            except kubernetes.client.ApiException:
                continue  # an aggregated API that does not answer: kubectl skips it too
            for r in listed:
                if "/" in r["name"]:
                    continue  # a subresource
                resource = Resource(group, version, r["name"], r["namespaced"], r["kind"])
                for name in names_of(group, r):
                    resources.setdefault(name, []).append(resource)
        self._resources = resources
        self._discovered = time.monotonic()
