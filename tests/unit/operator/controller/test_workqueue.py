"""The per-job queue folds bursts of events and never runs one job twice at once."""

from __future__ import annotations

import asyncio

from tfjob_operator.controller.workqueue import WorkQueue


def test_burst_of_events_folds_into_one_rerun():
    async def main():
        calls: list[str] = []
        gate = asyncio.Event()
        concurrent = 0
        peak = 0

        async def work(key):
            nonlocal concurrent, peak
            concurrent += 1
            peak = max(peak, concurrent)
            calls.append(key)
            await gate.wait()
            concurrent -= 1
            return None

        q = WorkQueue(work)
        q.schedule("a")
        await asyncio.sleep(0)
        for _ in range(50):
            q.schedule("a")
        q.schedule("b")
        gate.set()
        # Every reconcile the queue started, reruns included, to its end.
        while tasks := asyncio.all_tasks() - {asyncio.current_task()}:
            await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return calls, peak, q.runs

    calls, peak, runs = asyncio.run(main())
    assert calls.count("a") == 2 and calls.count("b") == 1
    assert runs == len(calls), "every reconcile begun is counted, reruns too"
    assert peak == 2, "different jobs run side by side, one job never twice"


def test_requested_requeue_runs_again():
    async def main():
        seen = asyncio.Event()
        runs = []

        async def work(key):
            runs.append(key)
            if len(runs) == 2:
                seen.set()
                return None
            return 0.01

        q = WorkQueue(work)
        q.schedule("a")
        await asyncio.wait_for(seen.wait(), 5)
        q.close()
        return runs

    assert asyncio.run(main()) == ["a", "a"]


def test_failures_back_off_and_recover():
    async def main():
        done = asyncio.Event()
        attempts = []

        async def work(key):
            attempts.append(asyncio.get_running_loop().time())
            if len(attempts) < 3:
                raise RuntimeError("api down")
            done.set()
            return None

        q = WorkQueue(work, max_backoff=0.05)
        q.schedule("a")
        await asyncio.wait_for(done.wait(), 5)
        q.close()
        return attempts

    attempts = asyncio.run(main())
    assert len(attempts) == 3
    assert attempts[2] - attempts[1] >= 0.04, "the second retry waited for the backoff"
