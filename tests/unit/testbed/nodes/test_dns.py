"""The test bed's cluster DNS records, as tables: what each Service and its endpoints resolve to,
and the hosts file dnsmasq reads them from."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tfjob_testbed.nodes.dns import dns_records, hosts_text

DOMAIN = "cluster.local"
HEADER = "# cluster DNS records, written by tfjob_testbed.nodes.nodeservices\n"


def service(
    name: str, namespace: str = "ml", cluster_ip: str | None = "None", **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterIP": cluster_ip, "ports": [{"port": 2222}], **spec},
    }


def endpoints(name: str, *subsets: dict[str, Any], namespace: str = "ml") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "subsets": list(subsets)}


def subset(
    ready: Sequence[tuple[str, ...]] = (),
    not_ready: Sequence[tuple[str, ...]] = (),
    port: int = 2222,
) -> dict[str, Any]:
    """Addresses as (ip,) or (ip, hostname)."""

    def address(a: tuple[str, ...]) -> dict[str, str]:
        return {"ip": a[0], **({"hostname": a[1]} if len(a) > 1 else {})}

    out: dict[str, Any] = {"ports": [{"port": port, "protocol": "TCP"}]}
    if ready:
        out["addresses"] = [address(a) for a in ready]
    if not_ready:
        out["notReadyAddresses"] = [address(a) for a in not_ready]
    return out


W = "w.ml.svc.cluster.local"


@pytest.mark.parametrize(
    ("services", "eps", "want"),
    [
        pytest.param(
            [service("api", cluster_ip="10.0.0.10")],
            [],
            ["10.0.0.10 api.ml.svc.cluster.local"],
            id="clusterip-without-endpoints",
        ),
        pytest.param(
            [service("w", cluster_ip="10.0.0.10")],
            [endpoints("w", subset([("10.244.0.5", "w-0")]))],
            [f"10.0.0.10 {W}"],
            id="clusterip-answers-its-ip-not-endpoint-hostnames",
        ),
        pytest.param(
            [service("api", cluster_ip="10.0.0.10", clusterIPs=["10.0.0.10", "fd00::a"])],
            [],
            ["10.0.0.10 api.ml.svc.cluster.local", "fd00::a api.ml.svc.cluster.local"],
            id="dual-stack-cluster-ips",
        ),
        pytest.param(
            [service("api", cluster_ip=None)],
            [endpoints("api", subset([("10.244.0.5",)]))],
            [],
            id="no-cluster-ip-yet",
        ),
        pytest.param([service("w")], [], [], id="headless-without-endpoints"),
        pytest.param(
            [service("w")],
            [endpoints("w")],
            [],
            id="headless-with-empty-endpoints",
        ),
        pytest.param(
            [service("w")],
            [endpoints("w", subset([("10.244.0.5",), ("10.244.0.6",)]))],
            [f"10.244.0.5 {W}", f"10.244.0.6 {W}"],
            id="headless-ready-addresses",
        ),
        pytest.param(
            [service("w")],
            [endpoints("w", subset([("10.244.0.5", "w-0"), ("", "w-1")]))],
            [f"10.244.0.5 w-0.{W}", f"10.244.0.5 {W}"],
            id="address-without-ip",
        ),
        pytest.param(
            [service("w")],
            [endpoints("w", subset([("10.244.0.5", "w-0")], [("10.244.0.6", "w-1")]))],
            [f"10.244.0.5 w-0.{W}", f"10.244.0.5 {W}"],
            id="not-ready-hidden-unless-published",
        ),
        pytest.param(
            [service("w", publishNotReadyAddresses=True)],
            [endpoints("w", subset([("10.244.0.5", "w-0")], [("10.244.0.6", "w-1")]))],
            [f"10.244.0.5 w-0.{W}", f"10.244.0.6 w-1.{W}", f"10.244.0.5 {W}", f"10.244.0.6 {W}"],
            id="not-ready-published",
        ),
        pytest.param(
            [service("w", publishNotReadyAddresses=True)],
            [
                endpoints(
                    "w",
                    subset([("10.244.0.5", "w-0"), ("10.244.0.7",)], port=2222),
                    subset([("10.244.0.5", "w-0")], [("10.244.0.6", "w-1")], port=6006),
                )
            ],
            [
                f"10.244.0.5 w-0.{W}",
                f"10.244.0.6 w-1.{W}",
                f"10.244.0.5 {W}",
                f"10.244.0.6 {W}",
                f"10.244.0.7 {W}",
            ],
            id="subsets-per-port-deduplicated",
        ),
        pytest.param(
            [service("w"), service("w", namespace="other")],
            [endpoints("w", subset([("10.244.0.9",)]), namespace="other")],
            ["10.244.0.9 w.other.svc.cluster.local"],
            id="endpoints-stay-in-their-namespace",
        ),
        pytest.param(
            [],
            [endpoints("w", subset([("10.244.0.5", "w-0")]))],
            [],
            id="endpoints-without-service",
        ),
        pytest.param(
            [{"metadata": {"name": "x", "namespace": "ml"}, "spec": {"type": "ExternalName"}}],
            [],
            [],
            id="external-name-needs-a-cname",
        ),
        pytest.param(
            [service("b", cluster_ip="10.0.0.3"), service("a", cluster_ip="10.0.0.20")],
            [],
            ["10.0.0.20 a.ml.svc.cluster.local", "10.0.0.3 b.ml.svc.cluster.local"],
            id="sorted-by-name",
        ),
    ],
)
def test_dns_records(
    services: list[dict[str, Any]], eps: list[dict[str, Any]], want: list[str]
) -> None:
    assert dns_records(services, eps, DOMAIN) == want


def test_dns_records_in_another_domain() -> None:
    got = dns_records([service("api", cluster_ip="10.0.0.1")], [], "corp.example")
    assert got == ["10.0.0.1 api.ml.svc.corp.example"]


@pytest.mark.parametrize(
    ("lines", "body"),
    [
        pytest.param([], "", id="no-records-still-a-file"),
        pytest.param(["10.0.0.1 a.ml.svc.cluster.local"], "10.0.0.1 a.ml.svc.cluster.local\n"),
        pytest.param(
            ["10.0.0.1 a.ml.svc.cluster.local", "10.244.0.5 w.ml.svc.cluster.local"],
            "10.0.0.1 a.ml.svc.cluster.local\n10.244.0.5 w.ml.svc.cluster.local\n",
            id="one-record-a-line-in-order",
        ),
    ],
)
def test_hosts_text_is_a_header_then_one_record_a_line(lines: list[str], body: str) -> None:
    assert hosts_text(lines) == HEADER + body
