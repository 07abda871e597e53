"""Cluster DNS as a hosts file: the records the Kubernetes DNS spec gives Services and their
endpoints (`dns_records`) and the file dnsmasq serves them from (`hosts_text`).

The bed runs no CoreDNS: the node services process (`nodeservices.py`) feeds these functions the
Services and Endpoints it watches and writes what they return, so what pods resolve is decided
here, without an API server or a file."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tfjob_testbed.nodes.kubeobjects import Obj, key_of

DEFAULT_DOMAIN = "cluster.local"


def _published_addresses(endpoints: Mapping[str, Any] | None, not_ready: bool) -> list[Obj]:
    """Addresses DNS answers with: ready ones, and not-ready ones when the Service publishes
    them (the operator's headless Services do, so workers resolve each other while starting)."""
    out: list[Obj] = []
    for subset in (endpoints or {}).get("subsets") or []:
        out.extend(subset.get("addresses") or [])
        if not_ready:
            out.extend(subset.get("notReadyAddresses") or [])
    return out


def dns_records(
    services: Iterable[Mapping[str, Any]],
    endpoints: Iterable[Mapping[str, Any]],
    domain: str = DEFAULT_DOMAIN,
) -> list[str]:
    """Hosts-file lines ("IP NAME") the cluster DNS would answer for, sorted by name then IP.

    A ClusterIP Service resolves to its cluster IPs; a headless one to its published endpoint
    addresses, and each such address with a ``hostname`` also gets
    ``<hostname>.<svc>.<ns>.svc.<domain>``, as the Kubernetes DNS spec defines for headless
    Services only. ExternalName Services need a CNAME, which a hosts file cannot hold.
    """
    by_key = {key_of(e): e for e in endpoints}
    records: set[tuple[str, str]] = set()
    for svc in services:
        ns, name = key_of(svc)
        spec = svc.get("spec") or {}
        if spec.get("type") == "ExternalName":
            continue
        fqdn = f"{name}.{ns}.svc.{domain}"
        cluster_ips = [ip for ip in (spec.get("clusterIPs") or [spec.get("clusterIP")]) if ip]
        if "None" not in cluster_ips:
            records.update((fqdn, ip) for ip in cluster_ips)
            continue
        not_ready = bool(spec.get("publishNotReadyAddresses"))
        for address in _published_addresses(by_key.get((ns, name)), not_ready):
            ip = address.get("ip")
            if not ip:
                continue
            records.add((fqdn, ip))
            if address.get("hostname"):
                records.add((f"{address['hostname']}.{fqdn}", ip))
    return [f"{ip} {name}" for name, ip in sorted(records)]


def hosts_text(lines: list[str]) -> str:
    """The hosts file: a header saying where it comes from, then one record a line."""
    return "# cluster DNS records, written by tfjob_testbed.nodes.nodeservices\n" + "".join(
        f"{line}\n" for line in lines
    )
