"""Local-path volumes, decided without an API server or a disk: the StorageClass whose claims the
bed provisions (`storage_class_manifest`), which claims are its and the hostPath
PersistentVolume each gets (`claim_class`, `volume_for_claim`, `volume_dir`), and which volumes
it may delete with their directory (`released_volume_dir`).

The bed runs no storage provisioner: the node services process (`nodeservices.py`) stands in
for kind's local-path one, asks these functions what to do with each claim and volume it
watches, and does it. A class that waits for the first consumer (``WaitForFirstConsumer``)
provisions only on the node the scheduler picked and pins the volume there, as a node-local
disk is; one that binds at once (``Immediate``) is pinned nowhere."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

from tfjob_testbed.nodes.kubeobjects import Obj

PROVISIONER = "tfjob.dev/local-path"
DEFAULT_STORAGE_CLASS = "standard"
ANN_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
ANN_DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
ANN_BETA_CLASS = "volume.beta.kubernetes.io/storage-class"  # still honoured by the PV binder
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"  # set by the scheduler (late binding)
HOSTNAME_LABEL = "kubernetes.io/hostname"
IMMEDIATE, WAIT_FOR_FIRST_CONSUMER = "Immediate", "WaitForFirstConsumer"
BINDING_MODES = (IMMEDIATE, WAIT_FOR_FIRST_CONSUMER)


def storage_class_manifest(
    name: str = DEFAULT_STORAGE_CLASS, binding_mode: str = IMMEDIATE, default: bool = True
) -> Obj:
    """A StorageClass whose claims the bed provisions: by default the default class, as kind
    names its own."""
    if binding_mode not in BINDING_MODES:
        raise ValueError(f"volumeBindingMode {binding_mode!r}: one of {BINDING_MODES}")
    metadata: Obj = {"name": name}
    if default:
        metadata["annotations"] = {ANN_DEFAULT_CLASS: "true"}
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": metadata,
        "provisioner": PROVISIONER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": binding_mode,
    }


def claim_class(claim: Mapping[str, Any]) -> str | None:
    """The claim's class, read the way the PV binder reads it (beta annotation first)."""
    annotations = (claim.get("metadata") or {}).get("annotations") or {}
    if ANN_BETA_CLASS in annotations:
        return str(annotations[ANN_BETA_CLASS])
    return (claim.get("spec") or {}).get("storageClassName")


def volume_dir(volumes_dir: PurePath, claim: Mapping[str, Any]) -> PurePath:
    """Where the claim's data lives: ``<volumes_dir>/<namespace>-<name>-<uid>``."""
    meta = claim["metadata"]
    return volumes_dir / f"{meta['namespace']}-{meta['name']}-{meta['uid']}"


def volume_for_claim(
    claim: Mapping[str, Any],
    volumes_dir: PurePath,
    storage_class: str = DEFAULT_STORAGE_CLASS,
    binding_mode: str = IMMEDIATE,
) -> Obj | None:
    """The PersistentVolume to create for ``claim``, or None when it is not ours to provision.

    Ours: a Pending claim of ``storage_class`` that no volume is bound to yet. A claim that
    names no class at all is left alone, as the binder would: only the DefaultStorageClass
    admission (or the user) makes it ours by setting ``spec.storageClassName``. Claims with a
    selector, a data source or a block volume mode are skipped, as external provisioners do.

    A class that waits for the first consumer (``binding_mode``) provisions only once the
    scheduler has named the node (``volume.kubernetes.io/selected-node``), and its volume may
    be used on that node only (``nodeAffinity``), as kind's local-path volumes.
    """
    meta = claim.get("metadata") or {}
    spec = claim.get("spec") or {}
    phase = (claim.get("status") or {}).get("phase", "Pending")
    storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
    node = ((meta.get("annotations") or {}).get(ANN_SELECTED_NODE)) or None
    late = binding_mode == WAIT_FOR_FIRST_CONSUMER
    if (
        claim_class(claim) != storage_class
        or phase != "Pending"
        or spec.get("volumeName")
        or meta.get("deletionTimestamp")
        or spec.get("selector")
        or spec.get("dataSource")
        or spec.get("volumeMode", "Filesystem") != "Filesystem"
        or not storage
        or not meta.get("uid")
        or (late and node is None)
    ):
        return None
    pv: Obj = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": f"pvc-{meta['uid']}",
            "annotations": {ANN_PROVISIONED_BY: PROVISIONER},
        },
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": list(spec.get("accessModes") or []),
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "storageClassName": storage_class,
            "persistentVolumeReclaimPolicy": "Delete",
            "volumeMode": "Filesystem",
            "hostPath": {
                "path": str(volume_dir(volumes_dir, claim)),
                "type": "DirectoryOrCreate",
            },
        },
    }
    if late:
        term = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}]}
        pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    return pv


def released_volume_dir(volume: Mapping[str, Any], volumes_dir: PurePath) -> PurePath | None:
    """The directory to delete with ``volume``, or None unless the volume is ours, Released
    and reclaimed by Delete. A path outside ``volumes_dir`` is never ours to remove."""
    meta = volume.get("metadata") or {}
    spec = volume.get("spec") or {}
    path = (spec.get("hostPath") or {}).get("path")
    if (
        (meta.get("annotations") or {}).get(ANN_PROVISIONED_BY) != PROVISIONER
        or spec.get("persistentVolumeReclaimPolicy") != "Delete"
        or (volume.get("status") or {}).get("phase") != "Released"
        or not path
    ):
        return None
    pure = PurePath(os.path.normpath(path))
    if pure.parent != PurePath(os.path.normpath(volumes_dir)) or pure.name in ("", "..", "."):
        return None
    return pure
