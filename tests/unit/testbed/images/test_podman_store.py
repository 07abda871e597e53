"""podman on the bed's own storage: its storage under the cache, a failure's output in the error,
and one build at a time across processes while a process may take the lock again."""

from __future__ import annotations

import fcntl
from pathlib import Path

import pytest

from tfjob_testbed.images import podman_store
from tfjob_testbed.images.podman_store import ImageError, locked, quiet_id, run


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TFJOB_CACHE", str(tmp_path))
    return tmp_path


def shell(monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """podman replaced by a shell script, its arguments after the script's name."""
    monkeypatch.setattr(podman_store, "podman_command", lambda: ["sh", "-c", script, "podman"])


def test_the_storage_is_the_caches_own(cache: Path) -> None:
    cmd = podman_store.podman_command()
    options = dict(zip(cmd[1::2], cmd[2::2], strict=True))
    assert cmd[0] == "podman"
    assert options["--root"] == str(cache / "podman" / "root")
    assert options["--runroot"] == str(cache / "podman" / "runroot")
    assert (options["--cgroup-manager"], options["--events-backend"]) == ("cgroupfs", "file")
    assert podman_store.images_dir() == cache / "images"


@pytest.mark.parametrize("logged", [False, True])
def test_a_failure_carries_the_commands_output_tail(
    cache: Path, monkeypatch: pytest.MonkeyPatch, logged: bool
) -> None:
    shell(monkeypatch, 'for i in $(seq 1 40); do echo "line $i"; done; echo oops >&2; exit 3')
    log = cache / "logs" / "build.log" if logged else None
    with pytest.raises(ImageError, match="exited 3") as failure:
        run("build", log=log)
    lines = str(failure.value).splitlines()[1:]
    assert lines == [f"line {i}" for i in range(12, 41)] + ["oops"]
    if log is not None:
        assert log.read_text().splitlines()[-1] == "oops"


def test_a_success_gives_the_output_and_an_id_is_quiet_when_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shell(monkeypatch, 'echo "$*"')
    assert run("image", "inspect", "x").stdout == "image inspect x\n"
    assert quiet_id("x") == "image inspect --format {{.Id}} x"
    shell(monkeypatch, "exit 125")
    assert quiet_id("x") is None


def test_the_lock_is_taken_again_within_a_process_and_held_across_processes(cache: Path) -> None:
    lock_file = cache / "images" / ".lock"
    with locked():
        with locked():  # re-entrant: a build inside a build
            assert held_elsewhere(lock_file)
        assert held_elsewhere(lock_file)
    assert not held_elsewhere(lock_file)


def held_elsewhere(lock_file: Path) -> bool:
    """Whether another open file description would wait for the build lock."""
    with open(lock_file, "w") as other:
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(other, fcntl.LOCK_UN)
        return False
