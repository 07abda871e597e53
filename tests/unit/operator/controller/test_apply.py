"""Children before bookkeeping: a status write (and the Events after it) waits while children
are being applied, and no longer than its bound. Which StatefulSets the first apply after a
start changed."""

from __future__ import annotations

import asyncio

import pytest

from tfjob_operator.controller import apply
from tfjob_operator.controller.apply import ChildrenFirst, edited_meanwhile
from tfjob_operator.rules.statefulsets import StatefulSetObservation


def test_a_status_write_waits_for_the_children_being_applied():
    async def main() -> list[str]:
        first, done, order = ChildrenFirst(), asyncio.Event(), []

        async def children() -> None:
            with first.applying():
                order.append("applying")
                await done.wait()
                order.append("applied")

        async def status() -> None:
            await first.wait()
            order.append("status")

        applying = asyncio.create_task(children())
        await asyncio.sleep(0)
        writing = asyncio.create_task(status())
        for _ in range(10):
            await asyncio.sleep(0)
        assert order == ["applying"], "the status write went first"
        done.set()
        await asyncio.wait_for(asyncio.gather(applying, writing), 5)
        return order

    assert asyncio.run(main()) == ["applying", "applied", "status"]


def test_with_nothing_being_applied_a_status_write_goes_at_once():
    async def main() -> None:
        first = ChildrenFirst()
        with first.applying():
            pass
        await first.wait()  # no timer: a wait would need STATUS_WAIT_SECONDS

    asyncio.run(asyncio.wait_for(main(), apply.STATUS_WAIT_SECONDS / 2))


def test_a_status_write_waits_no_longer_than_its_bound(monkeypatch):
    """Under a steady stream of new jobs, the status writes still go."""
    monkeypatch.setattr(apply, "STATUS_WAIT_SECONDS", 0.05)

    async def main() -> bool:
        first = ChildrenFirst()
        with first.applying():
            await asyncio.wait_for(first.wait(), 5)
            return True

    assert asyncio.run(main())


def child(kind: str, name: str) -> dict:
    return {"kind": kind, "metadata": {"name": name}}


CHILDREN = [child("Service", "j-ps"), child("StatefulSet", "j-ps"), child("StatefulSet", "j-w")]


@pytest.mark.parametrize(
    ("seen", "applied", "edited"),
    [
        ({}, {"j-ps": 1, "j-w": 1}, []),  # none seen: a new job's, or the index not filled
        ({"j-ps": 1, "j-w": 1}, {"j-ps": 1, "j-w": 1}, []),
        ({"j-ps": 1, "j-w": 3}, {"j-ps": 1, "j-w": 4}, ["j-w"]),
        ({"j-ps": 1, "j-w": 1}, {"j-ps": 2, "j-w": 2}, ["j-ps", "j-w"]),
        ({"j-ps": 0, "j-w": 1}, {"j-ps": 2, "j-w": 1}, []),  # a generation not known
        ({"j-ps": 1, "j-w": 1}, {"j-ps": 1}, []),  # the worker not applied
        ({"other": 1}, {"j-ps": 2, "j-w": 2}, []),
    ],
)
def test_the_statefulsets_whose_generation_the_apply_moved(seen, applied, edited):
    observed = [StatefulSetObservation(n, f"uid-{n}", 1, generation=g) for n, g in seen.items()]
    got = edited_meanwhile(CHILDREN, applied, observed)
    assert [(c["kind"], c["metadata"]["name"]) for c in got] == [("StatefulSet", n) for n in edited]
