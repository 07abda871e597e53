"""Children before bookkeeping: a status write (and the Events after it) waits while children
are being applied, and no longer than its bound."""

from __future__ import annotations

import asyncio

from tfjob_operator.controller import apply
from tfjob_operator.controller.apply import ChildrenFirst


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
