"""Who may hold the leader Lease, as a table over the pure rules (`claim`, `release`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tfjob_operator.controller.leader import Timing, claim, expiry, format_time, release
from tfjob_operator.rules.status import parse_timestamp as parse_time

NOW = datetime(2026, 11, 24, 12, 0, 0, 500000, tzinfo=UTC)
ME, OTHER = "op-a_1234", "op-b_5678"


def lease(holder: str | None, renewed_ago: float, duration: int = 15, transitions: int = 3):
    return {
        "holderIdentity": holder,
        "leaseDurationSeconds": duration,
        "acquireTime": format_time(NOW - timedelta(seconds=600)),
        "renewTime": format_time(NOW - timedelta(seconds=renewed_ago)),
        "leaseTransitions": transitions,
    }


@pytest.mark.parametrize(
    ("spec", "mine", "transitions", "acquired_now"),
    [
        (None, True, 0, True),  # no Lease yet: the first replica creates it
        ({}, True, 0, True),
        (lease(None, 1), True, 3, True),  # released: free at once
        (lease(ME, 1), True, 3, False),  # ours: renewed, acquireTime kept
        (lease(ME, 60), True, 3, False),  # ours even if late: the API accepted the renewal
        (lease(OTHER, 1), False, None, None),  # held
        (lease(OTHER, 14.9), False, None, None),  # held until the very end
        (lease(OTHER, 15), True, 4, True),  # run out: taken, one more transition
        (lease(OTHER, 3, duration=1), True, 4, True),  # a released Lease (duration 1)
    ],
)
def test_claim(spec, mine, transitions, acquired_now):
    got = claim(spec, ME, NOW, 15)
    if not mine:
        assert got is None
        return
    assert got["holderIdentity"] == ME
    assert parse_time(got["renewTime"]) == NOW
    assert got["leaseDurationSeconds"] == 15
    assert got["leaseTransitions"] == transitions
    acquired = parse_time(got["acquireTime"])
    assert (acquired == NOW) is acquired_now


def test_release_frees_only_our_own_lease():
    assert release(lease(OTHER, 1), ME, NOW) is None
    freed = release(lease(ME, 1), ME, NOW)
    assert freed["holderIdentity"] is None and freed["leaseDurationSeconds"] == 1
    assert expiry(freed, 15) is None
    assert claim(freed, OTHER, NOW, 15)["holderIdentity"] == OTHER


def test_expiry_and_micro_time_round_trip():
    assert format_time(NOW) == "2026-11-24T12:00:00.500000Z"
    assert expiry(lease(OTHER, 5), 15) == NOW + timedelta(seconds=10)
    assert expiry({"holderIdentity": OTHER}, 15) is None
    assert parse_time("not a time") is None and parse_time(None) is None


@pytest.mark.parametrize(
    ("timing", "ok"),
    [
        (Timing(), True),
        (Timing(15, 10, 2), True),
        (Timing(10, 10, 2), False),  # the leader could still write as another takes over
        (Timing(15, 2, 2), False),
        (Timing(15, 10, 0), False),
    ],
)
def test_timing_rules(timing, ok):
    assert (timing.problems() == []) is ok


FAST = Timing(1.0, 0.5, 0.05)


def run_elector(attempts, timing=FAST, deadline=5.0):
    """Run a LeaderElector whose Lease calls answer from `attempts` (results or exceptions,
    the last one repeated); return (events, elector)."""
    import asyncio

    from tfjob_operator.controller.leader import LeaderElector

    events: list[str] = []
    elector = LeaderElector(
        "ns",
        "lease",
        ME,
        timing,
        on_leading=lambda: events.append("leading"),
        on_lost=lambda why: events.append(f"lost: {why}"),
    )
    answers = list(attempts)

    def attempt():
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    elector._attempt = attempt

    async def main():
        await asyncio.wait_for(elector.guarded(), deadline)

    try:
        asyncio.run(main())
    except TimeoutError:
        events.append("still running")
    return events, elector


def test_leader_that_cannot_reach_the_api_server_loses_at_the_renew_deadline():
    import urllib3

    down = urllib3.exceptions.MaxRetryError(None, "/lease", reason=ConnectionRefusedError(111))
    events, elector = run_elector([(True, None), (True, None), down])
    assert events[0] == "leading"
    assert events[1].startswith("lost: cannot reach the Lease: MaxRetryError")
    assert not elector.may_write()


def test_standby_rides_out_errors_and_leads_once_the_api_answers():
    events, elector = run_elector(
        [OSError("refused"), ValueError("bad json"), (False, None), (True, None)], deadline=1.0
    )
    assert events == ["leading", "still running"]
    assert elector.may_write()


def test_another_holder_seen_by_the_leader_is_a_loss_at_once():
    events, _ = run_elector([(True, None), (False, None)])
    assert events == ["leading", "lost: another replica holds the Lease"]
