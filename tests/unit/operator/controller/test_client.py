"""What keeps the operator's API requests few: one list of FailedCreate Events per namespace
read for every StatefulSet in it (nothing in kopf wakes on a clock: test_handlers.py); and which
refusal of a StatefulSet's apply is the one its switch to OnDelete heals."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import kubernetes
import pytest

from tfjob_operator.controller.client import _leaves_rolling_update, newest_messages

EARLY, LATE = datetime(2026, 1, 1, 12, 0, tzinfo=UTC), datetime(2026, 1, 1, 12, 5, tzinfo=UTC)
PS, WORKER, OLD_WORKER = ("j-ps", "u1"), ("j-worker", "u2"), ("j-worker", "u0")


@pytest.mark.parametrize(
    ("events", "want"),
    [
        ([], {}),
        ([(PS, EARLY, "quota")], {PS: "quota"}),
        ([(PS, LATE, "newer"), (PS, EARLY, "older")], {PS: "newer"}),
        ([(PS, EARLY, "older"), (PS, LATE, "newer")], {PS: "newer"}),
        ([(PS, EARLY, "a"), (WORKER, LATE, "b")], {PS: "a", WORKER: "b"}),
        # A StatefulSet made again under the same name is another object.
        ([(OLD_WORKER, LATE, "old"), (WORKER, EARLY, "new")], {OLD_WORKER: "old", WORKER: "new"}),
        ([(PS, LATE, None), (PS, EARLY, "said")], {PS: "said"}),
    ],
)
def test_newest_failed_create_message_per_statefulset(events, want):
    assert newest_messages(events) == want


def refusal(status: int, *fields: str) -> kubernetes.client.ApiException:
    e = kubernetes.client.ApiException(status=status, reason="Invalid")
    causes = [{"reason": "FieldValueInvalid", "field": f} for f in fields]
    e.body = json.dumps({"kind": "Status", "code": status, "details": {"causes": causes}})
    return e


@pytest.mark.parametrize(
    ("error", "switch"),
    [
        # A StatefulSet of an earlier operator: Kubernetes' defaulted rollingUpdate stays
        # beside the OnDelete applied, and is refused.
        (refusal(422, "spec.updateStrategy.rollingUpdate"), True),
        (refusal(422, "spec.template.spec.containers[0].image"), False),
        (refusal(409, "spec.updateStrategy.rollingUpdate"), False),
        (kubernetes.client.ApiException(status=422, reason="no body"), False),
    ],
)
def test_only_the_rolling_update_left_behind_is_taken_away(error, switch):
    assert _leaves_rolling_update(error) is switch
