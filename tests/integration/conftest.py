"""Fixtures the integration tests share (helpers.py has what they read with)."""

from __future__ import annotations

import pytest

from tests.integration.helpers import Job


@pytest.fixture
def job(custom, core, apps, kubectl, ns, operator):
    return Job(custom, core, apps, kubectl, ns)


@pytest.fixture
def kf_job(custom, core, apps, kubectl, ns, kubeflow_operator):
    """The namespace's TFJobs of Kubeflow's group, run by the operator that serves it."""
    return Job(custom, core, apps, kubectl, ns, group="kubeflow.org")
