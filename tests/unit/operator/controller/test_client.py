"""What keeps the operator's API requests few: one list of FailedCreate Events per namespace
read for every StatefulSet in it. (Nothing in kopf wakes on a clock: test_handlers.py.)"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tfjob_operator.controller.client import newest_messages

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
