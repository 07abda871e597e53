"""The test bed's local-path volumes, as tables: its StorageClasses, which claims it provisions
and the hostPath volume each gets, and which volumes it deletes with their directory."""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

import pytest

from tfjob_testbed.nodes.volumes import (
    claim_class,
    released_volume_dir,
    storage_class_manifest,
    volume_dir,
    volume_for_claim,
)

VOLUMES = PurePath("/var/lib/tfjob-volumes")
UID = "0b6c3e1a-59f4-4a63-9d3b-2f1d5c0e7a11"
BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
DEFAULT_CLASS = {"storageclass.kubernetes.io/is-default-class": "true"}


def claim(
    storage_class: str | None = "standard",
    size: str | None = "1Gi",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    phase: str = "Pending",
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
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
    assert volume_for_claim(claim(), VOLUMES) == {
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
    pv = volume_for_claim(claim(size=size, modes=modes), VOLUMES)
    assert pv is not None
    spec = pv["spec"]
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
            claim(None, annotations={BETA_CLASS: "standard"}),
            "standard",
            True,
            id="beta-annotation",
        ),
        pytest.param(
            claim(annotations={BETA_CLASS: "fast"}),
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
def test_which_claims_are_provisioned(body: dict[str, Any], storage_class: str, ours: bool) -> None:
    pv = volume_for_claim(body, VOLUMES, storage_class)
    assert (pv is not None) is ours
    if pv:
        assert pv["spec"]["storageClassName"] == storage_class


def test_a_deleted_claim_is_not_provisioned() -> None:
    body = claim()
    body["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    assert volume_for_claim(body, VOLUMES) is None


def test_a_claim_without_a_uid_is_not_provisioned() -> None:
    body = claim()
    del body["metadata"]["uid"]
    assert volume_for_claim(body, VOLUMES) is None


SELECTED = {"volume.kubernetes.io/selected-node": "tfjob-node-2"}
WAIT = "WaitForFirstConsumer"


def pinned_to(node: str) -> dict[str, Any]:
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
    body: dict[str, Any], mode: str, affinity: dict[str, Any] | str | None
) -> None:
    """ "none": no volume at all; None: a volume with no node affinity."""
    pv = volume_for_claim(body, VOLUMES, "standard", mode)
    if affinity == "none":
        assert pv is None
        return
    assert pv is not None
    assert pv["spec"].get("nodeAffinity") == affinity
    assert pv["spec"]["hostPath"]["path"] == f"{VOLUMES}/ml-data-{UID}"


@pytest.mark.parametrize(
    ("body", "want"),
    [
        pytest.param(claim("standard"), "standard", id="spec"),
        pytest.param(claim(None), None, id="none"),
        pytest.param(claim(""), "", id="explicitly-none"),
        pytest.param(claim(None, annotations={BETA_CLASS: "fast"}), "fast", id="beta-only"),
        pytest.param(claim("standard", annotations={BETA_CLASS: "fast"}), "fast", id="beta-wins"),
        pytest.param(claim("standard", annotations={BETA_CLASS: ""}), "", id="beta-empty-wins"),
        pytest.param({}, None, id="nothing"),
    ],
)
def test_a_claims_class_is_read_as_the_binder_reads_it(
    body: dict[str, Any], want: str | None
) -> None:
    assert claim_class(body) == want


@pytest.mark.parametrize(
    ("root", "namespace", "name", "uid", "want"),
    [
        (VOLUMES, "ml", "data", UID, f"{VOLUMES}/ml-data-{UID}"),
        (VOLUMES, "team-a", "ckpt-w-0", "u1", f"{VOLUMES}/team-a-ckpt-w-0-u1"),
        (PurePath("/v"), "ml", "data", "u2", "/v/ml-data-u2"),
    ],
)
def test_a_claims_directory_is_named_for_it(
    root: PurePath, namespace: str, name: str, uid: str, want: str
) -> None:
    body = {"metadata": {"namespace": namespace, "name": name, "uid": uid}}
    assert volume_dir(root, body) == PurePath(want)


def volume(
    phase: str = "Released",
    policy: str = "Delete",
    provisioner: str = "tfjob.dev/local-path",
    path: str = f"{VOLUMES}/ml-data-{UID}",
) -> dict[str, Any]:
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
        pytest.param(volume(path=""), None, id="no-path"),
    ],
)
def test_which_volumes_are_reclaimed(pv: dict[str, Any], want: PurePath | None) -> None:
    assert released_volume_dir(pv, VOLUMES) == want


def test_storage_class_is_the_default_and_binds_at_once() -> None:
    sc = storage_class_manifest("standard")
    assert sc["metadata"] == {"name": "standard", "annotations": DEFAULT_CLASS}
    assert (sc["provisioner"], sc["volumeBindingMode"], sc["reclaimPolicy"]) == (
        "tfjob.dev/local-path",
        "Immediate",
        "Delete",
    )


@pytest.mark.parametrize(
    ("name", "mode", "default", "annotations"),
    [
        ("standard", "Immediate", True, DEFAULT_CLASS),
        ("standard", WAIT, True, DEFAULT_CLASS),
        ("shared", "Immediate", False, None),
        ("shared", WAIT, False, None),
    ],
)
def test_storage_class_binds_as_asked_and_only_the_default_says_so(
    name: str, mode: str, default: bool, annotations: dict[str, str] | None
) -> None:
    sc = storage_class_manifest(name, mode, default=default)
    assert (sc["metadata"]["name"], sc["volumeBindingMode"]) == (name, mode)
    assert sc["metadata"].get("annotations") == annotations
    assert (sc["provisioner"], sc["reclaimPolicy"]) == ("tfjob.dev/local-path", "Delete")


@pytest.mark.parametrize("mode", ["Later", "immediate", ""])
def test_an_unknown_binding_mode_is_refused(mode: str) -> None:
    with pytest.raises(ValueError, match="volumeBindingMode"):
        storage_class_manifest("standard", mode)
