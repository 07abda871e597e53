"""Two real nodes: the bed's own and a second one joining it (tfjob_testbed.nodes.second_node). Pods
pinned to each node find each other through the cluster DNS and reach each other over TCP,
through their Services (kube-proxy on both nodes); a `shared` (NFS-like) claim written on one
node is read on the other; a `standard` claim binds only once its first pod is scheduled, and
its volume is pinned to that pod's node, as kind's local-path volumes are."""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest

from tests.node.cluster_reads import POD_WAIT, pod
from tfjob_testbed.core.gobuild import CONTAINERD, KUBERNETES
from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.nodes import node as node_mod
from tfjob_testbed.nodes import second_node as second_mod
from tfjob_testbed.nodes.host import run
from tfjob_testbed.nodes.node import Node
from tfjob_testbed.nodes.nodeconfig import GPUS, bridge_mac
from tfjob_testbed.nodes.second_node import SecondNode
from tfjob_testbed.operator_cluster import OperatorCluster

pytestmark = pytest.mark.node

IMAGE = "tfjob-operator/trainer:0.1.0"  # it has python
PORT = 8080
HOSTNAME = "kubernetes.io/hostname"
SELECTED_NODE = "volume.kubernetes.io/selected-node"

# Serves "<me> on <node>" on PORT; resolves the other's Service through the cluster DNS and
# reads its answer; exits 0 once it has reached the other and been reached by it.
PEER = r"""
import os, socket, sys, threading, time
me, other = sys.argv[1:3]
served = threading.Event()

def serve():
    srv = socket.create_server(("", 8080))
    while True:
        conn, addr = srv.accept()
        with conn:
            conn.sendall(f"{me} on {os.environ['NODE']}\n".encode())
        print(f"served {addr[0]}", flush=True)
        served.set()

threading.Thread(target=serve, daemon=True).start()
host = f"{other}.{os.environ['NAMESPACE']}.svc.cluster.local"
deadline = time.monotonic() + 150
while True:
    try:
        ip = socket.gethostbyname(host)
        with socket.create_connection((ip, 8080), timeout=3) as conn:
            reply = conn.makefile().readline().strip()
        print(f"reached {host} at {ip}: {reply}", flush=True)
        break
    except OSError as e:
        if time.monotonic() > deadline:
            sys.exit(f"gave up on {host}: {e}")
        time.sleep(0.3)
if not served.wait(150):
    sys.exit("never reached by the other")
"""


def pinned_pod(
    name: str, node: str, command: list[str], volumes: dict[str, str] | None = None
) -> dict[str, Any]:
    """A pod of the trainer image on `node` (nodeSelector on its hostname label), ending after
    its command; `volumes`: claim name -> mount path."""
    mounts = [
        {"name": f"v{i}", "mountPath": path} for i, path in enumerate((volumes or {}).values())
    ]
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "main",
                "image": IMAGE,
                "command": command,
                "ports": [{"containerPort": PORT}],
                "env": [
                    {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {
                        "name": "NAMESPACE",
                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                    },
                ],
                "volumeMounts": mounts,
            }
        ],
        "volumes": [
            {"name": f"v{i}", "persistentVolumeClaim": {"claimName": claim}}
            for i, claim in enumerate(volumes or {})
        ],
    }
    if node:
        spec["nodeSelector"] = {HOSTNAME: node}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": spec,
    }


def service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"selector": {"app": name}, "ports": [{"port": PORT, "targetPort": PORT}]},
    }


def claim(name: str, storage_class: str | None, mode: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": [mode], "resources": {"requests": {"storage": "1Mi"}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": spec,
    }


def succeeded(cluster: OperatorCluster, name: str, namespace: str) -> dict[str, Any]:
    """Wait for the pod to succeed; fail at once, with its log, if it fails."""

    def done() -> dict[str, Any] | None:
        p = pod(cluster, name, namespace)
        phase = (p.get("status") or {}).get("phase")
        if phase == "Failed":
            raise AssertionError(f"{name} failed:\n{cluster.logs(name, namespace)}")
        return p if phase == "Succeeded" else None

    return wait_for(done, POD_WAIT, f"pod {name} Succeeded", interval=0.5)


def test_second_node_joins_ready_with_its_own_pod_range(
    cluster: OperatorCluster, node: Node, second_node: SecondNode
) -> None:
    assert second_node.name == "tfjob-node-2"
    assert node.second() is second_node, "a healthy second node is reused"
    nodes = {n["metadata"]["name"]: n for n in cluster.get("nodes")["items"]}
    assert set(nodes) == {node_mod.NODE_NAME, second_node.name}
    two = nodes[second_node.name]
    assert {"type": "InternalIP", "address": second_mod.NODE_IP} in two["status"]["addresses"]
    assert two["metadata"]["labels"][HOSTNAME] == second_node.name
    assert two["status"]["allocatable"]["nvidia.com/gpu"] == str(GPUS)
    ready = [c for c in two["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True", ready
    # The release the bed builds, on the API server and on both nodes' kubelets.
    release = KUBERNETES.version()
    served = cluster.kubectl("version", "-o", "json").stdout
    assert json.loads(served)["serverVersion"]["gitVersion"] == release, served
    for name, each in nodes.items():
        assert each["status"]["nodeInfo"]["kubeletVersion"] == release, name
        assert each["status"]["nodeInfo"]["containerRuntimeVersion"] == (
            f"containerd://{CONTAINERD.version().removeprefix('v')}"
        ), name


def test_each_nodes_bridge_keeps_the_mac_it_was_given(node: Node, second_node: SecondNode) -> None:
    """A bridge whose MAC nobody set takes its lowest port's, and moves it when that pod is
    deleted: every other pod's gateway, the cluster DNS, then answers no lookup until their
    ARP entries expire. Each node's bridge has a MAC set by hand (addr_assign_type 3), which
    the kernel never replaces."""
    sysfs = f"/sys/class/net/{node_mod.BRIDGE}"
    inside = ("ip", "netns", "exec", second_mod.NETNS)  # mounts the namespace's own /sys
    for ip, read in (
        (node_mod.NODE_IP, lambda f: (Path(sysfs) / f).read_text()),
        (second_mod.NODE_IP, lambda f: run(*inside, "cat", f"{sysfs}/{f}").stdout),
    ):
        assert read("addr_assign_type").strip() == "3", ip
        assert read("address").strip() == bridge_mac(ip), ip


def test_pods_on_both_nodes_reach_each_other_by_service_name(
    cluster: OperatorCluster, node: Node, second_node: SecondNode, namespace: str
) -> None:
    peers = {"east": node_mod.NODE_NAME, "west": second_node.name}
    other = {"east": "west", "west": "east"}
    for name, on in peers.items():
        cluster.apply(service(name), namespace)
        cluster.apply(
            pinned_pod(name, on, ["python", "-u", "-c", PEER, name, other[name]]), namespace
        )
    ran = {name: succeeded(cluster, name, namespace) for name in peers}
    ranges = {
        node_mod.NODE_NAME: ipaddress.ip_network(node_mod.POD_CIDR),
        second_node.name: ipaddress.ip_network(second_mod.POD_CIDR),
    }
    for name, on in peers.items():
        assert ran[name]["spec"]["nodeName"] == on
        assert ipaddress.ip_address(ran[name]["status"]["podIP"]) in ranges[on], ran[name]
        log = cluster.logs(name, namespace)
        svc = f"{other[name]}.{namespace}.svc.cluster.local"
        cluster_ip = cluster.get("service", other[name], "-n", namespace)["spec"]["clusterIP"]
        assert f"reached {svc} at {cluster_ip}: {other[name]} on {peers[other[name]]}" in log, log
        assert "served " in log, log
    # Each node's kubelet wrote its own pods' logs, in its own /var/log/pods.
    assert "reached west." in node.container_log(namespace, "east", "main")
    assert "reached east." in second_node.container_log(namespace, "west", "main")
    assert node.container_log(namespace, "west", "main") == ""
    assert second_node.container_log(namespace, "east", "main") == ""


def test_shared_claim_written_on_one_node_is_read_on_the_other(
    cluster: OperatorCluster, node: Node, second_node: SecondNode, namespace: str
) -> None:
    cluster.apply(claim("common", node_mod.SHARED_STORAGE_CLASS, "ReadWriteMany"), namespace)
    bound = wait_for(
        lambda: (
            (c := cluster.get("pvc", "common", "-n", namespace))["status"].get("phase") == "Bound"
            and c
        ),
        POD_WAIT,
        "the shared claim Bound before any pod uses it",
    )
    pv = cluster.get("pv", bound["spec"]["volumeName"])
    assert "nodeAffinity" not in pv["spec"], pv["spec"]
    write = "import os; open('/data/note', 'w').write('from ' + os.environ['NODE'])"
    cluster.apply(
        pinned_pod("writer", second_node.name, ["python", "-c", write], {"common": "/data"}),
        namespace,
    )
    succeeded(cluster, "writer", namespace)
    read = "print(open('/data/note').read())"
    cluster.apply(
        pinned_pod("reader", node_mod.NODE_NAME, ["python", "-c", read], {"common": "/data"}),
        namespace,
    )
    succeeded(cluster, "reader", namespace)
    assert cluster.logs("reader", namespace).strip() == f"from {second_node.name}"


def test_standard_claim_is_provisioned_on_its_first_pods_node_and_pinned_there(
    cluster: OperatorCluster, node: Node, second_node: SecondNode, namespace: str
) -> None:
    classes = {c["metadata"]["name"]: c for c in cluster.get("storageclass")["items"]}
    assert classes["standard"]["volumeBindingMode"] == "WaitForFirstConsumer"
    assert classes[node_mod.SHARED_STORAGE_CLASS]["volumeBindingMode"] == "Immediate"
    cluster.apply(claim("local", None, "ReadWriteOnce"), namespace)  # the default class

    def waiting() -> bool:
        events = cluster.get("events", "-n", namespace)["items"]
        return any(
            e["involvedObject"]["name"] == "local" and e["reason"] == "WaitForFirstConsumer"
            for e in events
        )

    wait_for(waiting, POD_WAIT, "the claim to wait for its first consumer")
    pending = cluster.get("pvc", "local", "-n", namespace)
    assert pending["spec"]["storageClassName"] == "standard"
    assert pending["status"]["phase"] == "Pending" and not pending["spec"].get("volumeName")

    write = "open('/data/note', 'w').write('kept')"
    cluster.apply(
        pinned_pod("first", second_node.name, ["python", "-c", write], {"local": "/data"}),
        namespace,
    )
    succeeded(cluster, "first", namespace)
    bound = cluster.get("pvc", "local", "-n", namespace)
    assert bound["status"]["phase"] == "Bound"
    assert bound["metadata"]["annotations"][SELECTED_NODE] == second_node.name
    pv = cluster.get("pv", bound["spec"]["volumeName"])
    assert pv["spec"]["nodeAffinity"] == {
        "required": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": HOSTNAME, "operator": "In", "values": [second_node.name]}
                    ]
                }
            ]
        }
    }
    # A later pod of the claim, pinned nowhere, goes where the volume is.
    read = "print(open('/data/note').read())"
    cluster.apply(pinned_pod("later", "", ["python", "-c", read], {"local": "/data"}), namespace)
    later = succeeded(cluster, "later", namespace)
    assert later["spec"]["nodeName"] == second_node.name
    assert cluster.logs("later", namespace).strip() == "kept"
