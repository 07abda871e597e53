"""Fixtures the integration tests share (helpers.py has what they read with)."""

from __future__ import annotations

import pytest

from tests.integration.helpers import Job


@pytest.fixture
def job(custom, core, apps, kubectl, ns, operator):
    return Job(custom, core, apps, kubectl, ns)
