"""The test bed's cluster DNS records and local-path volumes, without an API server: the pure
functions as tables, and the list-and-watch loop against a scripted API."""

from __future__ import annotations

import json
import queue
import stat
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path, PurePath
from typing import Any

import kubernetes
import pytest
import urllib3

from tfjob_testbed.nodes import nodeservices as ns
from tfjob_testbed.nodes.nodeservices import Changed, Reflector, Synced

DOMAIN = "cluster.local"
VOLUMES = PurePath("/var/lib/tfjob-volumes")
UID = "0b6c3e1a-59f4-4a63-9d3b-2f1d5c0e7a11"


def service(name: str, namespace: str = "ml", cluster_ip: str = "None", **spec: Any) -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterIP": cluster_ip, "ports": [{"port": 2222}], **spec},
    }


def endpoints(name: str, *subsets: dict, namespace: str = "ml") -> dict:
    return {"metadata": {"name": name, "namespace": namespace}, "subsets": list(subsets)}


def subset(ready: Sequence[tuple] = (), not_ready: Sequence[tuple] = (), port: int = 2222) -> dict:
    """Addresses as (ip,) or (ip, hostname)."""

    def address(a: tuple) -> dict:
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
def test_dns_records(services: list[dict], eps: list[dict], want: list[str]) -> None:
    assert ns.dns_records(services, eps, DOMAIN) == want


def test_dns_records_in_another_domain() -> None:
    got = ns.dns_records([service("api", cluster_ip="10.0.0.1")], [], "corp.example")
    assert got == ["10.0.0.1 api.ml.svc.corp.example"]


def claim(
    storage_class: str | None = "standard",
    size: str | None = "1Gi",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    phase: str = "Pending",
    annotations: dict | None = None,
    **spec: Any,
) -> dict:
    body: dict[str, Any] = {
        "metadata": {"name": "data", "namespace": "ml", "uid": UID},
        "spec": {"accessModes": list(modes), **spec},
        "status": {"phase": phase},
    }
    if size:
        body["spec"]["resources"] = {"requests": {"storage": size}}
    if storage_class is not None:
        body["spec"]["storageClassName"] = storage_class
    if annotations:
        body["metadata"]["annotations"] = annotations
    return body


def test_claim_becomes_a_hostpath_volume_bound_to_it() -> None:
    assert ns.volume_for_claim(claim(), VOLUMES) == {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": f"pvc-{UID}",
            "annotations": {"pv.kubernetes.io/provisioned-by": "tfjob.dev/local-path"},
        },
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": "ml",
                "name": "data",
                "uid": UID,
            },
            "storageClassName": "standard",
            "persistentVolumeReclaimPolicy": "Delete",
            "volumeMode": "Filesystem",
            "hostPath": {"path": f"{VOLUMES}/ml-data-{UID}", "type": "DirectoryOrCreate"},
        },
    }


@pytest.mark.parametrize(
    ("size", "modes"),
    [
        ("1Gi", ("ReadWriteOnce",)),
        ("500Mi", ("ReadWriteMany", "ReadOnlyMany")),
        ("10G", ("ReadOnlyMany",)),
        ("1.5Ti", ("ReadWriteOnce", "ReadWriteMany")),
    ],
)
def test_volume_size_and_access_modes_are_the_claims(size: str, modes: tuple[str, ...]) -> None:
    spec = ns.volume_for_claim(claim(size=size, modes=modes), VOLUMES)["spec"]
    assert (spec["capacity"], spec["accessModes"]) == ({"storage": size}, list(modes))


@pytest.mark.parametrize(
    ("body", "storage_class", "ours"),
    [
        pytest.param(claim(), "standard", True, id="of-the-class"),
        pytest.param(claim("fast"), "standard", False, id="another-class"),
        pytest.param(claim("fast"), "fast", True, id="a-class-named-by-flag"),
        pytest.param(claim(None), "standard", False, id="no-class-before-admission-set-it"),
        pytest.param(claim(""), "standard", False, id="explicitly-no-class"),
        pytest.param(
            claim(None, annotations={"volume.beta.kubernetes.io/storage-class": "standard"}),
            "standard",
            True,
            id="beta-annotation",
        ),
        pytest.param(
            claim(annotations={"volume.beta.kubernetes.io/storage-class": "fast"}),
            "standard",
            False,
            id="beta-annotation-wins-as-for-the-binder",
        ),
        pytest.param(claim(phase="Bound"), "standard", False, id="bound"),
        pytest.param(claim(volumeName="pv-1"), "standard", False, id="volume-named"),
        pytest.param(claim(selector={"matchLabels": {"a": "b"}}), "standard", False, id="selector"),
        pytest.param(claim(volumeMode="Block"), "standard", False, id="block"),
        pytest.param(claim(volumeMode="Filesystem"), "standard", True, id="filesystem"),
        pytest.param(
            claim(dataSource={"kind": "PersistentVolumeClaim", "name": "src"}),
            "standard",
            False,
            id="clone",
        ),
        pytest.param(claim(size=None), "standard", False, id="no-request"),
    ],
)
def test_which_claims_are_provisioned(body: dict, storage_class: str, ours: bool) -> None:
    pv = ns.volume_for_claim(body, VOLUMES, storage_class)
    assert (pv is not None) is ours
    if pv:
        assert pv["spec"]["storageClassName"] == storage_class


SELECTED = {"volume.kubernetes.io/selected-node": "tfjob-node-2"}
WAIT = "WaitForFirstConsumer"


def pinned_to(node: str) -> dict:
    term = {
        "matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]
    }
    return {"required": {"nodeSelectorTerms": [term]}}


@pytest.mark.parametrize(
    ("body", "mode", "affinity"),
    [
        pytest.param(claim(), "Immediate", None, id="immediate-at-once-pinned-nowhere"),
        pytest.param(
            claim(annotations=SELECTED), "Immediate", None, id="immediate-ignores-selected-node"
        ),
        pytest.param(claim(), WAIT, "none", id="late-waits-for-the-scheduler"),
        pytest.param(
            claim(annotations={"volume.kubernetes.io/selected-node": ""}),
            WAIT,
            "none",
            id="late-with-an-empty-node",
        ),
        pytest.param(
            claim(annotations=SELECTED), WAIT, pinned_to("tfjob-node-2"), id="late-pinned-there"
        ),
        pytest.param(claim(phase="Bound", annotations=SELECTED), WAIT, "none", id="late-but-bound"),
        pytest.param(
            claim("shared", modes=("ReadWriteMany",), annotations=SELECTED),
            WAIT,
            "none",
            id="late-class-is-not-the-claims",
        ),
    ],
)
def test_late_binding_provisions_on_the_selected_node_and_pins_there(
    body: dict, mode: str, affinity: dict | str | None
) -> None:
    """ "none": no volume at all; None: a volume with no node affinity."""
    pv = ns.volume_for_claim(body, VOLUMES, "standard", mode)
    if affinity == "none":
        assert pv is None
        return
    assert pv is not None
    assert pv["spec"].get("nodeAffinity") == affinity
    assert pv["spec"]["hostPath"]["path"] == f"{VOLUMES}/ml-data-{UID}"


def test_the_bed_has_a_late_default_class_and_a_shared_one() -> None:
    config = ns.Config(
        kubeconfig=Path("k"),
        hosts_file=Path("h"),
        volumes_dir=Path(VOLUMES),
        binding_mode=WAIT,
        shared_class="shared",
    )
    assert [
        (c["metadata"]["name"], c["metadata"].get("annotations"), c["volumeBindingMode"])
        for c in config.classes()
    ] == [
        ("standard", {"storageclass.kubernetes.io/is-default-class": "true"}, WAIT),
        ("shared", None, "Immediate"),
    ]
    assert {c["provisioner"] for c in config.classes()} == {"tfjob.dev/local-path"}
    one = ns.Config(kubeconfig=Path("k"), hosts_file=Path("h"), volumes_dir=Path(VOLUMES))
    assert [c["volumeBindingMode"] for c in one.classes()] == ["Immediate"]


def test_an_unknown_binding_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="volumeBindingMode"):
        ns.storage_class_manifest("standard", "Later")


def test_a_deleted_claim_is_not_provisioned() -> None:
    body = claim()
    body["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    assert ns.volume_for_claim(body, VOLUMES) is None


def volume(
    phase: str = "Released",
    policy: str = "Delete",
    provisioner: str = "tfjob.dev/local-path",
    path: str = f"{VOLUMES}/ml-data-{UID}",
) -> dict:
    return {
        "metadata": {
            "name": f"pvc-{UID}",
            "annotations": {"pv.kubernetes.io/provisioned-by": provisioner},
        },
        "spec": {"persistentVolumeReclaimPolicy": policy, "hostPath": {"path": path}},
        "status": {"phase": phase},
    }


@pytest.mark.parametrize(
    ("pv", "want"),
    [
        pytest.param(volume(), VOLUMES / f"ml-data-{UID}", id="released"),
        pytest.param(volume(phase="Bound"), None, id="bound"),
        pytest.param(volume(phase="Available"), None, id="available"),
        pytest.param(volume(policy="Retain"), None, id="retained"),
        pytest.param(volume(provisioner="rancher.io/local-path"), None, id="not-ours"),
        pytest.param(volume(path="/etc"), None, id="outside-the-volumes-dir"),
        pytest.param(volume(path=f"{VOLUMES}/../etc"), None, id="escaping-the-volumes-dir"),
        pytest.param(volume(path=f"{VOLUMES}/a/b"), None, id="nested"),
        pytest.param(volume(path=f"{VOLUMES}/"), None, id="the-volumes-dir-itself"),
    ],
)
def test_which_volumes_are_reclaimed(pv: dict, want: PurePath | None) -> None:
    assert ns.released_volume_dir(pv, VOLUMES) == want


def test_storage_class_is_the_default_and_binds_at_once() -> None:
    sc = ns.storage_class_manifest("standard")
    assert sc["metadata"] == {
        "name": "standard",
        "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
    }
    assert (sc["provisioner"], sc["volumeBindingMode"], sc["reclaimPolicy"]) == (
        "tfjob.dev/local-path",
        "Immediate",
        "Delete",
    )


def test_hosts_file_is_replaced_whole_and_readable(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("stale\n")
    ns.write_atomically(hosts, ns.hosts_text(["10.0.0.1 a.ml.svc.cluster.local"]))
    lines = [ln for ln in hosts.read_text().splitlines() if not ln.startswith("#")]
    assert lines == ["10.0.0.1 a.ml.svc.cluster.local"]
    assert stat.S_IMODE(hosts.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["hosts"]


# -- the list-and-watch loop against a scripted API ------------------------------------------


def obj(name: str, version: int) -> dict:
    return {"metadata": {"name": name, "namespace": "ml", "resourceVersion": str(version)}}


class Response:
    """Enough of urllib3's response for a list (``data``) or a watch (``stream``)."""

    def __init__(
        self, body: Any = None, events: Sequence[dict] = (), fail: Exception | None = None
    ):
        self.status = 200
        self.data = json.dumps(body).encode()
        self.events, self.fail = list(events), fail

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        for event in self.events:
            yield (json.dumps(event) + "\n").encode()
        if self.fail:
            raise self.fail

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class Held(Response):
    """A watch that stays open until the test ends."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        self.release.wait(30)
        return iter(())


class ScriptedApi:
    """A list function answering each call with the next step; the last watch stays open."""

    def __init__(self, *steps: Response | Exception) -> None:
        self.steps = deque(steps)
        self.calls: list[dict] = []
        self.held = Held()

    def __call__(self, **kwargs: Any) -> Response:
        self.calls.append(kwargs)
        step = self.steps.popleft() if self.steps else self.held
        if isinstance(step, Exception):
            raise step
        return step

    def summary(self) -> list[str]:
        """Each call as "list" or "watch@<resourceVersion>"."""
        return [f"watch@{c['resource_version']}" if c.get("watch") else "list" for c in self.calls]


def listed(*items: dict, version: int) -> Response:
    return Response({"items": list(items), "metadata": {"resourceVersion": str(version)}})


def run_reflector(api: ScriptedApi, count: int) -> list[Synced | Changed]:
    out: queue.Queue = queue.Queue()
    reflector = Reflector("services", api, out, min_backoff=0.0, max_backoff=0.0)
    reflector.start()
    try:
        messages = [out.get(timeout=10) for _ in range(count)]
        assert not api.steps, f"steps left: {list(api.steps)}"
        return messages
    finally:
        reflector.stop()
        api.held.release.set()
        reflector.join(10)


EXPIRED = {
    "type": "ERROR",
    "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"},
}


def test_watch_resumes_from_the_last_version_and_lists_again_when_expired() -> None:
    a, b = obj("a", 10), obj("b", 11)
    api = ScriptedApi(
        listed(a, version=10),
        Response(
            events=[
                {"type": "ADDED", "object": b},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}},
            ]
        ),  # the server ends the watch: resume from the bookmark, no list
        Response(events=[EXPIRED]),
        listed(b, version=20),
    )
    messages = run_reflector(api, 3)
    assert messages == [
        Synced("services", [a]),
        Changed("services", "ADDED", b),
        Synced("services", [b]),
    ]
    # the held watch may or may not have been asked for yet when the third message arrives
    assert api.summary()[:4] == ["list", "watch@10", "watch@15", "list"]
    watch = api.calls[1]
    assert (watch["allow_watch_bookmarks"], watch["timeout_seconds"]) == (True, ns.WATCH_SECONDS)


def test_errors_are_retried_with_a_new_list() -> None:
    refused = urllib3.exceptions.MaxRetryError(None, "/api/v1/services", ConnectionRefusedError())
    broken = urllib3.exceptions.ProtocolError("Response ended prematurely")
    a, b = obj("a", 3), obj("b", 4)
    api = ScriptedApi(
        refused,  # the API server is down
        kubernetes.client.ApiException(status=503, reason="Service Unavailable"),
        listed(a, version=3),
        Response(events=[{"type": "DELETED", "object": a}], fail=broken),  # it restarts
        refused,
        listed(b, version=4),
    )
    messages = run_reflector(api, 3)
    assert messages == [
        Synced("services", [a]),
        Changed("services", "DELETED", a),
        Synced("services", [b]),
    ]
    assert api.summary()[:6] == ["list", "list", "list", "watch@3", "list", "list"]


def test_errors_are_described_in_one_line() -> None:
    refused = urllib3.exceptions.MaxRetryError(
        None, "/api", urllib3.exceptions.NewConnectionError(None, "Connection refused")
    )
    line = ns.describe(refused)
    assert line.startswith("NewConnectionError: ") and line.endswith("Connection refused")
    gone = kubernetes.client.ApiException(status=410, reason="Gone")
    assert ns.describe(gone) == "410 Gone"
