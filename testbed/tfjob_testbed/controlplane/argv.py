"""The control plane's command lines: a pure function per process, from the paths, ports and
certificates the plane picked (`plane.ControlPlane` starts them, in this order)."""

from __future__ import annotations

from pathlib import Path

SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

# Kubernetes' own gang scheduling (1.37: the gate beta but off, its API version off): on
# wherever the bed's release has it, as on a cluster that offers gangs. The API server needs
# both; kube-scheduler (its GangScheduling plugin) and kube-controller-manager (the PodGroups'
# protection finalizer) the gate.
GANG_GATE = "--feature-gates=GenericWorkload=true"
GANG_API = "--runtime-config=scheduling.k8s.io/v1beta1=true"

# The plane's certificates and keys by name (ca, front-proxy-ca, serving, admin, proxy-client,
# sa): each (certificate, key), or for "sa" (public key, private key).
Certs = dict[str, tuple[Path, Path]]


def etcd_argv(binary: Path, data_dir: Path, client_url: str, peer_url: str) -> list[str]:
    """A single-member etcd on loopback, without fsync (its data is thrown away)."""
    return [
        str(binary),
        "--name=default",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=default={peer_url}",
        "--unsafe-no-fsync",
        "--logger=zap",
        "--log-outputs=stderr",
    ]


def apiserver_argv(
    binary: Path,
    *,
    etcd_url: str,
    pki_dir: Path,
    pki: Certs,
    address: str,
    port: int,
    audit_policy: Path,
    audit_log: Path,
    node: bool,
    gangs: bool = False,
) -> list[str]:
    """kube-apiserver on `address:port` with RBAC, service-account tokens, the aggregation
    layer's front proxy and an audit log; with `node`, it reaches the kubelet by InternalIP;
    with `gangs`, it serves Kubernetes' own gang API."""
    return [
        str(binary),
        f"--etcd-servers={etcd_url}",
        f"--cert-dir={pki_dir}",
        f"--tls-cert-file={pki['serving'][0]}",
        f"--tls-private-key-file={pki['serving'][1]}",
        f"--client-ca-file={pki['ca'][0]}",
        f"--service-account-key-file={pki['sa'][0]}",
        f"--service-account-signing-key-file={pki['sa'][1]}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
        "--authorization-mode=RBAC",
        *_node_apiserver_args(pki, node),
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        f"--advertise-address={address}",
        f"--bind-address={address}",
        f"--secure-port={port}",
        "--allow-privileged=true",
        f"--requestheader-client-ca-file={pki['front-proxy-ca'][0]}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-username-headers=X-Remote-User",
        f"--proxy-client-cert-file={pki['proxy-client'][0]}",
        f"--proxy-client-key-file={pki['proxy-client'][1]}",
        f"--audit-policy-file={audit_policy}",
        f"--audit-log-path={audit_log}",
        "--audit-log-maxsize=2000",
        "--audit-log-maxbackup=1",
        *([GANG_GATE, GANG_API] if gangs else []),
    ]


def _node_apiserver_args(pki: Certs, node: bool) -> list[str]:
    if not node:
        return ["--endpoint-reconciler-type=none"]
    return [
        "--kubelet-preferred-address-types=InternalIP",
        f"--kubelet-client-certificate={pki['admin'][0]}",
        f"--kubelet-client-key={pki['admin'][1]}",
    ]


def controller_manager_argv(
    binary: Path,
    *,
    kubeconfig: Path,
    pki: Certs,
    flexvolume_dir: Path,
    node: bool,
    gangs: bool = False,
) -> list[str]:
    """kube-controller-manager with every controller, signing with the plane's CA."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--service-account-private-key-file={pki['sa'][1]}",
        f"--root-ca-file={pki['ca'][0]}",
        f"--cluster-signing-cert-file={pki['ca'][0]}",
        f"--cluster-signing-key-file={pki['ca'][1]}",
        "--use-service-account-credentials=false",
        "--leader-elect=false",
        "--secure-port=0",
        f"--flex-volume-plugin-dir={flexvolume_dir}",
        "--controllers=*",
        # A lost node is NotReady ~20 s after its last status, for test speed (the
        # default is 40 s); its kubelet posts every 4 s with a 20 s lease (nodes/nodeconfig.py).
        *(["--node-monitor-grace-period=20s"] if node else []),
        *([GANG_GATE] if gangs else []),
    ]


def scheduler_argv(binary: Path, kubeconfig: Path, gangs: bool = False) -> list[str]:
    """kube-scheduler, for a plane that serves a real node."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--secure-port=0",
        *([GANG_GATE] if gangs else []),
    ]
