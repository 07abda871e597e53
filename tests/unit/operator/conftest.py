"""Fixtures shared by the operator's tests: `cluster`, the reconciler on a fake client (used by
controller/test_reconcile.py and by the rules tests that show the reconciler's calls)."""

from __future__ import annotations

from collections.abc import Iterator

import kopf
import pytest

from tests.unit.operator.controller.fakes import Cluster


@pytest.fixture
def cluster(monkeypatch) -> Iterator[Cluster]:
    c = Cluster()

    def event(body, *, type, reason, message):
        c.events.append((body["metadata"]["name"], reason))

    monkeypatch.setattr(kopf, "event", event)
    yield c
    c.close()
