"""A failed start reads as its cause: the log's tail, led by the earlier lines that explain it."""

from __future__ import annotations

from pathlib import Path

from tfjob_testbed.controlplane.errors import log_tail


def test_the_tail_is_led_by_the_causes_above_it(tmp_path: Path) -> None:
    log = tmp_path / "kube-apiserver.log"
    lines = [
        "I0 starting",
        "Error: bad flag --x",
        "I1 noise",
        "F0101 fatal: etcd",
        *[f"I {n}" for n in range(5)],
    ]
    log.write_text("\n".join(lines) + "\n")
    assert log_tail(log, lines=3).splitlines() == [
        "Error: bad flag --x",
        "F0101 fatal: etcd",
        "...",
        "I 2",
        "I 3",
        "I 4",
    ]


def test_a_short_log_is_all_tail(tmp_path: Path) -> None:
    log = tmp_path / "etcd.log"
    log.write_text("Error: early\nlast\n")
    assert log_tail(log, lines=5) == "Error: early\nlast"


def test_a_missing_log_says_so(tmp_path: Path) -> None:
    assert log_tail(tmp_path / "none.log").startswith(f"(cannot read {tmp_path / 'none.log'}")
