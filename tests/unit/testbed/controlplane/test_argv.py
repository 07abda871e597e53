"""The control plane's command lines, built by pure functions from what the plane picked."""

from __future__ import annotations

from pathlib import Path

import pytest

from tfjob_testbed.controlplane.argv import (
    SERVICE_ACCOUNT_ISSUER,
    SERVICE_CLUSTER_IP_RANGE,
    Certs,
    apiserver_argv,
    controller_manager_argv,
    etcd_argv,
    scheduler_argv,
)

PKI = Path("/w/pki")
CERTS: Certs = {
    name: (PKI / f"{name}.crt", PKI / f"{name}.key")
    for name in ("ca", "front-proxy-ca", "serving", "admin", "proxy-client", "sa")
}


def flags(argv: list[str]) -> dict[str, str]:
    return dict(a.removeprefix("--").partition("=")[::2] for a in argv[1:])


def test_etcd_listens_where_it_advertises() -> None:
    argv = etcd_argv(Path("/bin/etcd"), Path("/w/etcd-data"), "http://c:1", "http://p:2")
    assert argv[0] == "/bin/etcd"
    f = flags(argv)
    assert f["listen-client-urls"] == f["advertise-client-urls"] == "http://c:1"
    assert f["listen-peer-urls"] == f["initial-advertise-peer-urls"] == "http://p:2"
    assert f["initial-cluster"] == "default=http://p:2"
    assert f["data-dir"] == "/w/etcd-data"


def apiserver(node: bool, gangs: bool = False) -> list[str]:
    return apiserver_argv(
        Path("/bin/kube-apiserver"),
        etcd_url="http://c:1",
        pki_dir=PKI,
        pki=CERTS,
        address="10.1.2.3",
        port=6443,
        audit_policy=Path("/w/audit-policy.json"),
        audit_log=Path("/w/audit.log"),
        node=node,
        gangs=gangs,
    )


def test_apiserver_serves_on_its_address_with_the_plane_s_certificates() -> None:
    f = flags(apiserver(node=False))
    assert (f["advertise-address"], f["bind-address"], f["secure-port"]) == (
        "10.1.2.3",
        "10.1.2.3",
        "6443",
    )
    assert f["tls-cert-file"] == str(CERTS["serving"][0])
    assert f["client-ca-file"] == str(CERTS["ca"][0])
    assert f["service-account-signing-key-file"] == str(CERTS["sa"][1])
    assert f["service-account-issuer"] == f["api-audiences"] == SERVICE_ACCOUNT_ISSUER
    assert f["service-cluster-ip-range"] == SERVICE_CLUSTER_IP_RANGE
    assert f["audit-log-path"] == "/w/audit.log"


@pytest.mark.parametrize("node", [False, True])
def test_apiserver_reaches_a_kubelet_only_where_a_node_runs(node: bool) -> None:
    f = flags(apiserver(node))
    assert ("endpoint-reconciler-type" in f) is not node
    assert ("kubelet-client-certificate" in f) is node


def controller_manager(node: bool, gangs: bool = False) -> list[str]:
    return controller_manager_argv(
        Path("/bin/kcm"),
        kubeconfig=Path("/w/kcm.kubeconfig"),
        pki=CERTS,
        flexvolume_dir=Path("/w/flexvolume"),
        node=node,
        gangs=gangs,
    )


@pytest.mark.parametrize("node", [False, True])
def test_controller_manager_marks_a_lost_node_sooner_where_a_node_runs(node: bool) -> None:
    f = flags(controller_manager(node))
    assert f["cluster-signing-cert-file"] == str(CERTS["ca"][0])
    assert f["controllers"] == "*"
    assert f.get("node-monitor-grace-period") == ("20s" if node else None)


def test_scheduler() -> None:
    assert scheduler_argv(Path("/bin/ks"), Path("/w/k")) == [
        "/bin/ks",
        "--kubeconfig=/w/k",
        "--leader-elect=false",
        "--secure-port=0",
    ]


@pytest.mark.parametrize("gangs", [False, True])
def test_kubernetes_own_gangs_are_on_in_every_component_that_reads_the_gate(gangs: bool) -> None:
    """The API server serves scheduling.k8s.io/v1beta1 and all three take GenericWorkload,
    only for a release that has them (1.37+)."""
    api = apiserver(node=True, gangs=gangs)
    kcm = controller_manager(node=True, gangs=gangs)
    scheduler = scheduler_argv(Path("/bin/kube-scheduler"), Path("/w/k"), gangs)
    for argv in (api, kcm, scheduler):
        assert (flags(argv).get("feature-gates") == "GenericWorkload=true") is gangs
    assert (flags(api).get("runtime-config") == "scheduling.k8s.io/v1beta1=true") is gangs
