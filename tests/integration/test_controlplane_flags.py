"""The bed's control plane takes extra kube-controller-manager flags (the burst benchmark's
client limits) and gives them to kube-controller-manager alone: kube-apiserver refuses them."""

from __future__ import annotations

import pytest

from tfjob_testbed.controlplane.binaries import ensure_binaries
from tfjob_testbed.controlplane.plane import ControlPlane

FLAGS = ["--kube-api-qps=50", "--kube-api-burst=75", "--concurrent-statefulset-syncs=7"]


@pytest.mark.smoke
def test_controller_manager_flags_reach_the_controller_manager_alone(tmp_path):
    with ControlPlane(tmp_path, ensure_binaries(), controller_manager_args=FLAGS) as plane:
        argv = {proc.name: proc.argv for proc in plane._procs}
        assert set(FLAGS) <= set(argv["kube-controller-manager"])
        assert not set(FLAGS) & set(argv["kube-apiserver"])
