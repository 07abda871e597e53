"""The test bed's cluster services (tfjob_testbed.nodes.nodeservices) as their own process against
the real API server: hosts-file records follow Services and Endpoints within a second, claims
get volumes the controller-manager binds and that go with the claim, and a restart (even after
SIGKILL) duplicates nothing. There is no kubelet here, so the tests write Endpoints by hand."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import kubernetes
import pytest

from tfjob_testbed.core.kube import wait_for
from tfjob_testbed.core.paths import ROOT

pytestmark = pytest.mark.integration

CLASS = "standard"
PROVISIONER = "tfjob.dev/local-path"
LATENCY = 1.0  # a record must follow an Endpoints change within about a second
BIND_WAIT = 60
LOG_MARK = "===== start"


class NodeServicesProcess:
    """``python -m tfjob_testbed.nodes.nodeservices`` as the test bed runs it, logging to a file."""

    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.hosts = workdir / "dns" / "hosts"
        self.volumes = workdir / "volumes"
        self.log = workdir / "nodeservices.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        """Start; return once this run has written the hosts file and made its first pass over
        claims and volumes, so anything it does on start is done (and logged)."""
        self.starts += 1
        with self.log.open("a") as f:
            f.write(f"{LOG_MARK} #{self.starts} =====\n")
        out = self.log.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tfjob_testbed.nodes.nodeservices",
                "--kubeconfig",
                str(self.kubeconfig),
                "--hosts-file",
                str(self.hosts),
                "--volumes-dir",
                str(self.volumes),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        out.close()

        def up() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"nodeservices exited {self.proc.returncode}:\n{self.run_log()}"
                )
            log = self.run_log()
            return "hosts: wrote" in log and "volumes: checked" in log

        wait_for(up, 30, "nodeservices to write the hosts file and check volumes", interval=0.05)

    def kill(self) -> None:
        """A crash: no chance to clean up."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int | None:
        """SIGTERM; the exit code (None if it was not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return None
        self.proc.terminate()
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise

    def run_log(self) -> str:
        """The log of the current run only."""
        return self.log.read_text(errors="replace").rsplit(LOG_MARK, 1)[-1]

    def records(self, namespace: str) -> list[str]:
        """Hosts-file lines for names in ``namespace``, in file order, duplicates kept."""
        suffix = f".{namespace}.svc.cluster.local"
        lines = self.hosts.read_text().splitlines() if self.hosts.exists() else []
        return [ln for ln in lines if ln.endswith(suffix)]


@pytest.fixture(scope="module", autouse=True)
def storage(api) -> Iterator[kubernetes.client.StorageV1Api]:
    """The StorageClass the process makes is removed at the end, so the claims other tests'
    operators create keep no class, as on a control plane without this process."""
    client = kubernetes.client.StorageV1Api(api)
    yield client
    try:
        client.delete_storage_class(CLASS)
    except kubernetes.client.ApiException as e:
        if e.status != 404:
            raise


@pytest.fixture
def services(control_plane, tmp_path) -> Iterator[NodeServicesProcess]:
    proc = NodeServicesProcess(control_plane.kubeconfig, tmp_path)
    proc.start()
    try:
        yield proc
    finally:
        code = proc.stop()
        print(f"nodeservices log: {proc.log}")
    assert code == 0, f"SIGTERM should exit 0, got {code}:\n{proc.run_log()}"


def volumes_of(core: kubernetes.client.CoreV1Api, namespace: str) -> dict[str, object]:
    """PersistentVolumes whose claim is (or was) in ``namespace``, by name."""
    return {
        pv.metadata.name: pv
        for pv in core.list_persistent_volume().items
        if pv.spec.claim_ref and pv.spec.claim_ref.namespace == namespace
    }


@pytest.fixture
def space(kubectl, core, services) -> Iterator[str]:
    """A namespace of the test's own. Its claims are deleted first and their volumes waited
    for while the process still runs, so no volume or directory outlives the test."""
    name = f"nsvc-{uuid.uuid4().hex[:8]}"
    kubectl("create", "namespace", name)
    yield name
    core.delete_collection_namespaced_persistent_volume_claim(name)
    wait_for(lambda: not volumes_of(core, name), BIND_WAIT, f"the volumes of {name} to go")
    kubectl("delete", "namespace", name, "--wait=false")


def timed(change: Callable[[], object], check: Callable[[], object], what: str) -> float:
    """Seconds from sending ``change`` to ``check`` holding (the API call included); fails
    after LATENCY."""
    start = time.monotonic()
    change()
    wait_for(check, LATENCY, what, interval=0.005)
    return time.monotonic() - start


def headless(name: str) -> dict:
    """A headless Service as the operator makes them, without a selector: the endpoints
    controller then leaves the Endpoints the test writes alone."""
    return {
        "metadata": {"name": name},
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "ports": [{"name": "tfjob-port", "port": 2222}],
        },
    }


def endpoints(name: str, ready: dict[str, str], not_ready: dict[str, str] = {}) -> dict:  # noqa: B006
    """Endpoints with one subset; addresses as {ip: hostname}."""

    def addresses(by_ip: dict[str, str]) -> list[dict]:
        return [{"ip": ip, "hostname": host} for ip, host in by_ip.items()]

    subset: dict = {"ports": [{"name": "tfjob-port", "port": 2222}]}
    if ready:
        subset["addresses"] = addresses(ready)
    if not_ready:
        subset["notReadyAddresses"] = addresses(not_ready)
    return {"metadata": {"name": name}, "subsets": [subset]}


@pytest.mark.smoke
def test_records_follow_services_and_endpoints(core, services, space) -> None:
    ns, domain = space, f"{space}.svc.cluster.local"
    api = core.create_namespaced_service(
        space, {"metadata": {"name": "api"}, "spec": {"ports": [{"port": 80}]}}
    )
    ip = api.spec.cluster_ip
    core.create_namespaced_service(ns, headless("workers"))
    wait_for(
        lambda: services.records(ns) == [f"{ip} api.{domain}"],
        LATENCY,
        "the ClusterIP record alone: a headless Service without endpoints has none",
        interval=0.005,
    )

    w, w0, w1 = f"workers.{domain}", f"workers-0.workers.{domain}", f"workers-1.workers.{domain}"
    both_workers = {
        f"{ip} api.{domain}",
        f"10.244.0.11 {w}",
        f"10.244.0.12 {w}",
        f"10.244.0.11 {w0}",
        f"10.244.0.12 {w1}",
    }
    latencies = [
        timed(
            lambda: core.create_namespaced_endpoints(
                ns, endpoints("workers", {"10.244.0.11": "workers-0"}, {"10.244.0.12": "workers-1"})
            ),
            lambda: set(services.records(ns)) == both_workers,
            "records of ready and (published) not-ready addresses",
        ),
        timed(
            lambda: core.patch_namespaced_service(
                "workers", ns, {"spec": {"publishNotReadyAddresses": False}}
            ),
            lambda: (
                set(services.records(ns))
                == {f"{ip} api.{domain}", f"10.244.0.11 {w}", f"10.244.0.11 {w0}"}
            ),
            "not-ready addresses dropped once not published",
        ),
        timed(
            lambda: core.replace_namespaced_endpoints(
                "workers",
                ns,
                {
                    **endpoints(
                        "workers", {"10.244.0.11": "workers-0", "10.244.0.12": "workers-1"}
                    ),
                    "subsets": [
                        endpoints("workers", {"10.244.0.11": "workers-0"})["subsets"][0],
                        {
                            "addresses": [{"ip": "10.244.0.12", "hostname": "workers-1"}],
                            "ports": [{"name": "tensorboard", "port": 6006}],
                        },
                    ],
                },
            ),
            lambda: set(services.records(ns)) == both_workers,
            "addresses of two subsets (two ports)",
        ),
        timed(
            lambda: core.delete_namespaced_endpoints("workers", ns),
            lambda: services.records(ns) == [f"{ip} api.{domain}"],
            "the workers' records gone with their Endpoints",
        ),
        timed(
            lambda: core.delete_namespaced_service("api", ns),
            lambda: services.records(ns) == [],
            "the ClusterIP record gone with its Service",
        ),
    ]
    print("Endpoints/Service change -> hosts file:", ", ".join(f"{s:.3f}s" for s in latencies))
    assert services.run_log().count("hosts: wrote") >= 1 + len(latencies)


def claim(name: str, size: str, modes: list[str], storage_class: str | None = None) -> dict:
    spec: dict = {"accessModes": modes, "resources": {"requests": {"storage": size}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name}, "spec": spec}


def bound(core, ns: str, name: str) -> kubernetes.client.V1PersistentVolumeClaim:
    def check():
        c = core.read_namespaced_persistent_volume_claim(name, ns)
        return c.status.phase == "Bound" and c

    return wait_for(check, BIND_WAIT, f"claim {ns}/{name} to be Bound")


def gone(read: Callable[[], object]) -> bool:
    try:
        read()
    except kubernetes.client.ApiException as e:
        return e.status == 404
    return False


def test_claims_get_volumes_that_go_with_them(core, storage, services, space) -> None:
    ns = space
    sc = wait_for(lambda: storage.read_storage_class(CLASS), 30, "the StorageClass")
    assert sc.provisioner == PROVISIONER
    assert sc.metadata.annotations["storageclass.kubernetes.io/is-default-class"] == "true"
    assert (sc.volume_binding_mode, sc.reclaim_policy) == ("Immediate", "Delete")

    # The admission plugin reads classes from its own cache: wait until it knows the default.
    wait_for(
        lambda: (
            core.create_namespaced_persistent_volume_claim(
                ns, claim("probe", "1Gi", ["ReadWriteOnce"]), dry_run="All"
            ).spec.storage_class_name
            == CLASS
        ),
        30,
        "the DefaultStorageClass admission to give claims the class",
    )
    # Handled in the order created: by the time `data` is bound, `elsewhere` has been seen.
    core.create_namespaced_persistent_volume_claim(
        ns, claim("elsewhere", "1Gi", ["ReadWriteOnce"], "not-ours")
    )
    data = core.create_namespaced_persistent_volume_claim(
        ns, claim("data", "2Gi", ["ReadWriteMany", "ReadOnlyMany"])
    )
    assert data.spec.storage_class_name == CLASS, "set by the DefaultStorageClass admission"
    small = core.create_namespaced_persistent_volume_claim(
        ns, claim("small", "500Mi", ["ReadWriteOnce"], CLASS)
    )

    for c, size in ((data, "2Gi"), (small, "500Mi")):
        name = f"pvc-{c.metadata.uid}"
        assert bound(core, ns, c.metadata.name).spec.volume_name == name
        pv = core.read_persistent_volume(name)
        ref = pv.spec.claim_ref
        assert (ref.namespace, ref.name, ref.uid) == (ns, c.metadata.name, c.metadata.uid)
        assert pv.spec.capacity == {"storage": size}
        assert pv.spec.access_modes == c.spec.access_modes
        assert (pv.spec.storage_class_name, pv.spec.persistent_volume_reclaim_policy) == (
            CLASS,
            "Delete",
        )
        assert pv.metadata.annotations["pv.kubernetes.io/provisioned-by"] == PROVISIONER
        path = Path(pv.spec.host_path.path)
        assert path == services.volumes / f"{ns}-{c.metadata.name}-{c.metadata.uid}"
        assert stat.S_IMODE(path.stat().st_mode) == 0o777
    assert set(volumes_of(core, ns)) == {f"pvc-{data.metadata.uid}", f"pvc-{small.metadata.uid}"}
    elsewhere = core.read_namespaced_persistent_volume_claim("elsewhere", ns)
    assert (elsewhere.status.phase, elsewhere.spec.volume_name) == ("Pending", None)

    data_dir = services.volumes / f"{ns}-data-{data.metadata.uid}"
    (data_dir / "checkpoint").write_text("written by a pod")
    core.delete_namespaced_persistent_volume_claim("data", ns)
    pv_name = f"pvc-{data.metadata.uid}"
    wait_for(lambda: gone(lambda: core.read_persistent_volume(pv_name)), BIND_WAIT, "PV deleted")
    assert not data_dir.exists()
    assert set(volumes_of(core, ns)) == {f"pvc-{small.metadata.uid}"}
    log = services.run_log()
    assert f"volume {pv_name} created for claim {ns}/data" in log
    assert f"volume {pv_name} deleted (claim {ns}/data gone)" in log


def test_a_restart_duplicates_nothing(core, services, space) -> None:
    ns, domain = space, f"{space}.svc.cluster.local"
    core.create_namespaced_service(ns, headless("workers"))
    core.create_namespaced_endpoints(ns, endpoints("workers", {"10.244.0.21": "workers-0"}))
    keep = core.create_namespaced_persistent_volume_claim(
        ns, claim("keep", "1Gi", ["ReadWriteOnce"], CLASS)
    )
    drop = core.create_namespaced_persistent_volume_claim(
        ns, claim("drop", "1Gi", ["ReadWriteOnce"], CLASS)
    )
    keep_pv = bound(core, ns, "keep").spec.volume_name
    drop_pv = bound(core, ns, "drop").spec.volume_name
    drop_dir = services.volumes / f"{ns}-drop-{drop.metadata.uid}"
    assert drop_dir.is_dir()

    services.kill()
    # While it is down: a claim goes (the binder releases its volume), one comes, pods change.
    core.delete_namespaced_persistent_volume_claim("drop", ns)
    wait_for(
        lambda: core.read_persistent_volume(drop_pv).status.phase == "Released",
        BIND_WAIT,
        "the dropped claim's volume Released",
    )
    late = core.create_namespaced_persistent_volume_claim(
        ns, claim("late", "1Gi", ["ReadWriteOnce"], CLASS)
    )
    core.replace_namespaced_endpoints(
        "workers",
        ns,
        endpoints("workers", {"10.244.0.21": "workers-0", "10.244.0.22": "workers-1"}),
    )

    services.start()
    want = {
        f"10.244.0.21 workers.{domain}",
        f"10.244.0.22 workers.{domain}",
        f"10.244.0.21 workers-0.workers.{domain}",
        f"10.244.0.22 workers-1.workers.{domain}",
    }
    wait_for(lambda: set(services.records(ns)) == want, LATENCY, "records caught up", 0.01)
    late_pv = bound(core, ns, "late").spec.volume_name
    wait_for(lambda: gone(lambda: core.read_persistent_volume(drop_pv)), BIND_WAIT, "drop's PV")
    assert not drop_dir.exists()
    assert late_pv == f"pvc-{late.metadata.uid}"
    assert bound(core, ns, "keep").spec.volume_name == keep_pv == f"pvc-{keep.metadata.uid}"
    assert set(volumes_of(core, ns)) == {keep_pv, late_pv}
    assert sorted(services.records(ns)) == sorted(want), "each record once"
    log = services.run_log()
    assert f"created for claim {ns}/keep" not in log
    assert log.count(f"created for claim {ns}/late") == 1

    # A clean restart with nothing changed does nothing but rewrite the same records.
    assert services.stop() == 0
    before = services.hosts.read_text()
    services.start()
    assert services.hosts.read_text() == before
    assert set(volumes_of(core, ns)) == {keep_pv, late_pv}
    log = services.run_log()
    assert "created for claim" not in log and "deleted (claim" not in log, log
