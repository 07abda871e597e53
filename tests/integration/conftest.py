"""Fixtures the integration tests share (helpers.py has what they read with)."""

from __future__ import annotations

import kubernetes
import pytest

from tests.integration.helpers import Job
from tfjob_operator.controller.client import Kube


@pytest.fixture
def job(custom, core, apps, kubectl, ns, operator):
    return Job(custom, core, apps, kubectl, ns)


@pytest.fixture
def kf_job(custom, core, apps, kubectl, ns, kubeflow_operator):
    """The namespace's TFJobs of Kubeflow's group, run by the operator that serves it."""
    return Job(custom, core, apps, kubectl, ns, group="kubeflow.org")


@pytest.fixture
def kube(control_plane, monkeypatch) -> Kube:
    """The operator's own client, against the test's control plane."""
    monkeypatch.setenv("KUBECONFIG", str(control_plane.kubeconfig))
    kubernetes.config.load_kube_config(config_file=str(control_plane.kubeconfig))
    return Kube()
