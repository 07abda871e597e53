"""Which Kubernetes release the bed runs, and envtest's asset directory honoured."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tfjob_testbed.controlplane.binaries import ensure_binaries, kubernetes
from tfjob_testbed.controlplane.errors import ControlPlaneError
from tfjob_testbed.core.gobuild import KUBERNETES, KUBERNETES_OLDEST


@pytest.mark.parametrize(
    ("choice", "release"),
    [(None, KUBERNETES), ("newest", KUBERNETES), ("oldest", KUBERNETES_OLDEST)],
)
def test_the_release_is_the_one_asked_for(
    monkeypatch: pytest.MonkeyPatch, choice: str | None, release: object
) -> None:
    if choice is None:
        monkeypatch.delenv("TFJOB_KUBERNETES", raising=False)
    else:
        monkeypatch.setenv("TFJOB_KUBERNETES", choice)
    assert kubernetes() is release


def test_an_unknown_release_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TFJOB_KUBERNETES", "1.30")
    with pytest.raises(ControlPlaneError, match="expected newest or oldest"):
        kubernetes()


def _executable(path: Path) -> Path:
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_envtest_assets_are_used_where_they_are_complete(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("etcd", "kube-apiserver", "kube-controller-manager"):
        _executable(tmp_path / name)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    found = ensure_binaries()
    assert (found.etcd, found.kube_apiserver, found.kube_controller_manager) == (
        tmp_path / "etcd",
        tmp_path / "kube-apiserver",
        tmp_path / "kube-controller-manager",
    )
    assert not found.gangs


def test_envtest_assets_without_the_api_server_are_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _executable(tmp_path / "etcd")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="no executable kube-apiserver"):
        ensure_binaries()
    assert os.access(tmp_path / "etcd", os.X_OK)
