"""The node services process without an API server: the StorageClasses its command line asks
for, and the hosts file it hands dnsmasq."""

from __future__ import annotations

import stat
from pathlib import Path

from tfjob_testbed.nodes.dns import hosts_text
from tfjob_testbed.nodes.nodeservices import Config, write_atomically

VOLUMES = Path("/var/lib/tfjob-volumes")
WAIT = "WaitForFirstConsumer"


def test_the_bed_has_a_late_default_class_and_a_shared_one() -> None:
    config = Config(
        kubeconfig=Path("k"),
        hosts_file=Path("h"),
        volumes_dir=VOLUMES,
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
    one = Config(kubeconfig=Path("k"), hosts_file=Path("h"), volumes_dir=VOLUMES)
    assert [c["volumeBindingMode"] for c in one.classes()] == ["Immediate"]


def test_hosts_file_is_replaced_whole_and_readable(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("stale\n")
    write_atomically(hosts, hosts_text(["10.0.0.1 a.ml.svc.cluster.local"]))
    lines = [ln for ln in hosts.read_text().splitlines() if not ln.startswith("#")]
    assert lines == ["10.0.0.1 a.ml.svc.cluster.local"]
    assert stat.S_IMODE(hosts.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["hosts"]
