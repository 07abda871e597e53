"""Freed memory is handed back at most once a period, and only after work."""

from __future__ import annotations

import asyncio
import ctypes

import pytest

from tfjob_operator.controller import heap


@pytest.mark.parametrize(
    ("runs", "trimmed", "due"),
    [
        (0, -1, True),  # the first period: the start-up's own garbage
        (0, 0, False),  # nothing since
        (5, 0, True),  # reconciles began since the last trim
        (5, 5, False),  # trimmed after them already
    ],
)
def test_due_after_work_since_the_last_trim(runs: int, trimmed: int, due: bool) -> None:
    assert heap.due(runs, trimmed) is due


def test_glibc_trim_is_found_and_runs() -> None:
    if not hasattr(ctypes.CDLL(None), "malloc_trim"):
        pytest.skip("this C library has no malloc_trim")
    trim = heap.libc_trim()
    assert trim is not None
    assert trim() in (0, 1)  # whether memory was released


def test_trims_each_period_with_work_and_none_without() -> None:
    async def main() -> list[int]:
        count, looks = 0, 0
        trims: list[int] = []

        def runs() -> int:
            nonlocal count, looks
            looks += 1
            if 3 <= looks <= 5:
                count += 1  # work in the 3rd to 5th periods only
            return count

        task = asyncio.create_task(
            heap.trim_after_work(runs, lambda: trims.append(count), period=0.001)
        )
        while looks < 20:
            await asyncio.sleep(0.001)
        task.cancel()
        return trims

    trims = asyncio.run(asyncio.wait_for(main(), 10))
    assert trims == [0, 1, 2, 3], "the start-up, then each period with work, then none"
