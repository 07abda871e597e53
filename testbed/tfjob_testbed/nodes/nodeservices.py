"""Cluster DNS records and local-path volumes for the single-node test bed.

The bed runs a kubelet but neither CoreDNS nor a storage provisioner. This process stands in
for both, watching the API server:

- it keeps a hosts file in step with Services and Endpoints; dnsmasq (``--hostsdir``) serves
  it and re-reads it on change, so pods resolve ``<svc>.<ns>.svc.<domain>`` and the
  ``<hostname>.<svc>...`` names of StatefulSet pods;
- like kind's local-path provisioner, it makes a hostPath PersistentVolume for every pending
  claim of its StorageClass and deletes volume and directory once the claim is gone.

With ``--binding-mode WaitForFirstConsumer`` (what the bed runs, as kind does) the default class
binds late: a claim gets its volume only once the scheduler has picked a node for its first pod
(the claim's ``volume.kubernetes.io/selected-node``), and the volume is pinned to that node
(``nodeAffinity`` on ``kubernetes.io/hostname``), as a node-local disk is. ``--shared-class``
adds a second, non-default class that binds at once and is pinned nowhere: like NFS, every node
sees the same directory, for ReadWriteMany claims. Without these flags there is one class that
binds at once (a control plane with no scheduler or kubelet can still bind claims).

What it decides is kept apart from the I/O that does it, as pure functions: the records and the
hosts file in `dns.py`, the classes, volumes and reclaims in `volumes.py`; the threads that list
and watch the API server for it are `reflector.py`'s.

Usage::

    python -m tfjob_testbed.nodes.nodeservices --kubeconfig K --hosts-file F --volumes-dir D \\
        [--cluster-domain cluster.local] [--storage-class standard] \\
        [--binding-mode Immediate|WaitForFirstConsumer] [--shared-class shared]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import kubernetes
import urllib3

from tfjob_testbed.core.signals import Interrupted, interrupt_on
from tfjob_testbed.nodes.dns import DEFAULT_DOMAIN, dns_records, hosts_text
from tfjob_testbed.nodes.kubeobjects import Key, Obj, key_of
from tfjob_testbed.nodes.reflector import (
    MAX_BACKOFF,
    MIN_BACKOFF,
    Message,
    Reflector,
    Synced,
    describe,
)
from tfjob_testbed.nodes.volumes import (
    ANN_SELECTED_NODE,
    BINDING_MODES,
    DEFAULT_STORAGE_CLASS,
    IMMEDIATE,
    PROVISIONER,
    released_volume_dir,
    storage_class_manifest,
    volume_for_claim,
)

VOLUME_DIR_MODE = 0o777  # pods run as non-root (UID 65532) and must write their volume

SERVICES, ENDPOINTS, CLAIMS, VOLUMES = "services", "endpoints", "claims", "volumes"

log = logging.getLogger("nodeservices")


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` in one rename, so dnsmasq never reads half a file. The temporary file
    is a dotfile, which dnsmasq's --hostsdir ignores."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.chmod(0o644)  # dnsmasq drops root before reading
    os.replace(tmp, path)


# -- the services --------------------------------------------------------------------------


@dataclass
class Config:
    """The command line."""

    kubeconfig: Path
    hosts_file: Path
    volumes_dir: Path
    domain: str = DEFAULT_DOMAIN
    storage_class: str = DEFAULT_STORAGE_CLASS
    binding_mode: str = IMMEDIATE  # the default class's
    shared_class: str | None = None  # a second class: binds at once, pinned to no node

    def classes(self) -> list[Obj]:
        """The StorageClasses this process makes and provisions, the default one first."""
        out = [storage_class_manifest(self.storage_class, self.binding_mode)]
        if self.shared_class:
            out.append(storage_class_manifest(self.shared_class, IMMEDIATE, default=False))
        return out


@dataclass
class _State:
    """Everything the main loop knows; only its thread touches it."""

    objects: dict[str, dict[Key, Obj]] = field(
        default_factory=lambda: {k: {} for k in (SERVICES, ENDPOINTS, CLAIMS, VOLUMES)}
    )
    synced: set[str] = field(default_factory=set)
    written: list[str] | None = None  # hosts lines last written; None: not yet this run
    dns_dirty: bool = True
    class_ready: bool = False
    volumes_checked: bool = False  # the first pass over all claims and volumes is done
    dirty_claims: set[Key] = field(default_factory=set)
    dirty_volumes: set[Key] = field(default_factory=set)


class NodeServices:
    """One thread owns all state: reflectors feed it messages, it writes the hosts file and
    creates and deletes volumes, retrying whatever failed."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.queue: queue.Queue[Message] = queue.Queue()
        self.state = _State()
        api = self._client()
        self.core = kubernetes.client.CoreV1Api(api)
        self.storage = kubernetes.client.StorageV1Api(api)
        self.reflectors: list[Reflector] = []
        self._backoff = MIN_BACKOFF

    def _client(self) -> kubernetes.client.ApiClient:
        """A client of its own per thread: a shared pool would be too small for four watches."""
        client: kubernetes.client.ApiClient = kubernetes.config.new_client_from_config(
            config_file=str(self.config.kubeconfig)
        )
        return client

    def start(self) -> None:
        """One reflector per kind, all namespaces."""
        for kind, list_name in (
            (SERVICES, "list_service_for_all_namespaces"),
            (ENDPOINTS, "list_endpoints_for_all_namespaces"),
            (CLAIMS, "list_persistent_volume_claim_for_all_namespaces"),
            (VOLUMES, "list_persistent_volume"),
        ):
            core = kubernetes.client.CoreV1Api(self._client())
            reflector = Reflector(kind, getattr(core, list_name), self.queue)
            self.reflectors.append(reflector)
            reflector.start()

    def run(self) -> None:
        """Handle messages forever; a batch of them leads to at most one hosts-file write."""
        self.start()
        retry_at: float | None = None
        while True:
            timeout = None if retry_at is None else max(0.0, retry_at - time.monotonic())
            try:
                batch = [self.queue.get(timeout=timeout)]
            except queue.Empty:
                batch = []
            while True:
                try:
                    batch.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            for message in batch:
                self.apply(message)
            retry_at = self.reconcile()

    def apply(self, message: Message) -> None:
        """Update what is known and mark what needs acting on."""
        st = self.state
        store = st.objects[message.kind]
        if isinstance(message, Synced):
            store.clear()
            store.update((key_of(o), o) for o in message.items)
            st.synced.add(message.kind)
            touched = set(store)
        else:
            key = key_of(message.obj)
            if message.type == "DELETED":
                store.pop(key, None)
            else:
                store[key] = message.obj
            touched = {key}
        if message.kind in (SERVICES, ENDPOINTS):
            st.dns_dirty = True
        elif message.kind == CLAIMS:
            st.dirty_claims |= touched
        else:
            st.dirty_volumes |= touched

    def reconcile(self) -> float | None:
        """Act on what changed; return when to try failed steps again (None: nothing failed)."""
        st = self.state
        failed = False
        if st.dns_dirty and {SERVICES, ENDPOINTS} <= st.synced:
            try:
                self._write_hosts()
                st.dns_dirty = False
            except OSError as e:
                log.info("hosts: cannot write %s: %s", self.config.hosts_file, e)
                failed = True
        if not st.class_ready:
            try:
                for body in self.config.classes():
                    self._ensure_storage_class(body)
                st.class_ready = True
            except Exception as e:
                log.info("storage class %s: %s", self.config.storage_class, describe(e))
                failed = True
        if {CLAIMS, VOLUMES} <= st.synced:
            failed |= self._each(st.dirty_claims, self._provision)
            failed |= self._each(st.dirty_volumes, self._reclaim)
            if not st.volumes_checked:
                st.volumes_checked = True
                log.info(
                    "volumes: checked %d claims and %d volumes",
                    len(st.objects[CLAIMS]),
                    len(st.objects[VOLUMES]),
                )
        if not failed:
            self._backoff = MIN_BACKOFF
            return None
        retry_at = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, MAX_BACKOFF)
        return retry_at

    @staticmethod
    def _each(keys: set[Key], act: Callable[[Key], None]) -> bool:
        """Run ``act`` on every key; keys that failed stay in the set. True if any failed."""
        failed: set[Key] = set()
        for key in sorted(keys):
            try:
                act(key)
            except Exception as e:
                log.info("%s %s: %s", act.__name__.strip("_"), "/".join(key), describe(e))
                failed.add(key)
        keys.clear()
        keys |= failed
        return bool(failed)

    def _write_hosts(self) -> None:
        st = self.state
        lines = dns_records(
            st.objects[SERVICES].values(), st.objects[ENDPOINTS].values(), self.config.domain
        )
        if lines == st.written:
            return
        self.config.hosts_file.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(self.config.hosts_file, hosts_text(lines))
        st.written = lines
        log.info("hosts: wrote %d records to %s", len(lines), self.config.hosts_file)

    def _ensure_storage_class(self, body: Obj) -> None:
        try:
            # The client's signature asks for the model; it takes (validates) a dict as well.
            self.storage.create_storage_class(
                cast(kubernetes.client.V1StorageClass, body), _preload_content=False
            )
            log.info(
                "storage class %s created (%s%s, %s)",
                body["metadata"]["name"],
                "default, " if body["metadata"].get("annotations") else "",
                body["volumeBindingMode"],
                PROVISIONER,
            )
        except kubernetes.client.ApiException as e:
            if e.status != 409:
                raise
            # Without preloading, the client returns the raw HTTP response, not the model.
            resp = cast(
                urllib3.BaseHTTPResponse,
                self.storage.read_storage_class(body["metadata"]["name"], _preload_content=False),
            )
            found = json.loads(resp.data).get("provisioner")
            if found != PROVISIONER:
                log.info(
                    "storage class %s exists with provisioner %s", body["metadata"]["name"], found
                )

    def _provision(self, key: Key) -> None:
        claim = self.state.objects[CLAIMS].get(key)
        if claim is None:
            return
        pv = None
        for sc in self.config.classes():
            pv = pv or volume_for_claim(
                claim, self.config.volumes_dir, sc["metadata"]["name"], sc["volumeBindingMode"]
            )
        if pv is None:
            return
        name = pv["metadata"]["name"]
        if ("", name) in self.state.objects[VOLUMES]:
            return  # made before, the binder has yet to bind it
        path = Path(pv["spec"]["hostPath"]["path"])
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(VOLUME_DIR_MODE)  # mkdir's mode is cut by the umask
        try:
            self.core.create_persistent_volume(
                cast(kubernetes.client.V1PersistentVolume, pv), _preload_content=False
            )
        except kubernetes.client.ApiException as e:
            if e.status == 409:
                return  # made before a restart; its ADDED event is on the way
            raise
        self.state.objects[VOLUMES][("", name)] = pv
        affinity = pv["spec"].get("nodeAffinity")
        log.info(
            "volume %s created for claim %s (%s, %s, %s) at %s",
            name,
            "/".join(key),
            pv["spec"]["capacity"]["storage"],
            ",".join(pv["spec"]["accessModes"]),
            pv["spec"]["storageClassName"]
            + (f" on {claim['metadata']['annotations'][ANN_SELECTED_NODE]}" if affinity else ""),
            path,
        )

    def _reclaim(self, key: Key) -> None:
        pv = self.state.objects[VOLUMES].get(key)
        if pv is None:
            return
        pure = released_volume_dir(pv, self.config.volumes_dir)
        if pure is None:
            return
        path = Path(pure)
        removed = path.exists()
        if removed:
            shutil.rmtree(path)
        deleted = False
        if not pv["metadata"].get("deletionTimestamp"):
            try:
                self.core.delete_persistent_volume(key[1], _preload_content=False)
                deleted = True
            except kubernetes.client.ApiException as e:
                if e.status != 404:
                    raise
        if removed or deleted:
            ref = pv["spec"].get("claimRef") or {}
            log.info(
                "volume %s deleted (claim %s/%s gone), directory %s",
                key[1],
                ref.get("namespace"),
                ref.get("name"),
                "removed" if removed else "already gone",
            )


# -- command line --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tfjob_testbed.nodes.nodeservices",
        description="Cluster DNS records for dnsmasq and a local-path volume provisioner.",
    )
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--hosts-file", type=Path, required=True, help="written for dnsmasq")
    parser.add_argument("--volumes-dir", type=Path, required=True, help="volumes live here")
    parser.add_argument("--cluster-domain", default=DEFAULT_DOMAIN)
    parser.add_argument("--storage-class", default=DEFAULT_STORAGE_CLASS)
    parser.add_argument(
        "--binding-mode",
        choices=BINDING_MODES,
        default=IMMEDIATE,
        help="of the default class: WaitForFirstConsumer pins each volume to its first node",
    )
    parser.add_argument(
        "--shared-class", help="a second class, bound at once and pinned to no node (like NFS)"
    )
    args = parser.parse_args(argv)

    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        logging.Formatter("%(asctime)s.%(msecs)03d nodeservices %(message)s", "%H:%M:%S")
    )
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # its retries are reported above
    interrupt_on(signal.SIGTERM, signal.SIGINT)
    config = Config(
        kubeconfig=args.kubeconfig,
        hosts_file=args.hosts_file.absolute(),
        volumes_dir=args.volumes_dir.absolute(),
        domain=args.cluster_domain,
        storage_class=args.storage_class,
        binding_mode=args.binding_mode,
        shared_class=args.shared_class,
    )
    config.volumes_dir.mkdir(parents=True, exist_ok=True)
    classes = config.classes()
    try:
        log.info(
            "started: hosts %s, volumes %s, classes %s",
            config.hosts_file,
            config.volumes_dir,
            ", ".join(f"{c['metadata']['name']} ({c['volumeBindingMode']})" for c in classes),
        )
        NodeServices(config).run()
    except Interrupted as e:
        log.info("stopping (%s)", e)
    return 0


if __name__ == "__main__":
    sys.exit(main())
