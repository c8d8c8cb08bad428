"""`together`, the one scheduler of nodes, samples and rows: results in order, all or none."""

from __future__ import annotations

import asyncio
import gc

import pytest

from sembp_dsl.runtime.tasks import together


class Work:
    """Awaitables that finish after a delay (or fail), and remember how each one ended."""

    def __init__(self):
        self.ended: dict[str, str] = {}

    async def __call__(self, name: str, delay: float, fail: bool = False) -> str:
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self.ended[name] = "cancelled"
            raise
        if fail:
            self.ended[name] = "failed"
            raise ValueError(f"{name} failed")
        self.ended[name] = "done"
        return name


def test_results_come_in_the_order_given_not_the_order_finished():
    work = Work()
    results = asyncio.run(together([work("slow", 0.05), work("fast", 0.0), work("middle", 0.02)]))
    assert results == ["slow", "fast", "middle"]


def test_tasks_and_coroutines_alike_and_nothing_at_all():
    async def main():
        work = Work()
        task = asyncio.ensure_future(work("task", 0.01))
        return await together([task, work("coroutine", 0.0)]), await together([])

    assert asyncio.run(main()) == (["task", "coroutine"], [])


def test_the_first_failure_cancels_the_rest_and_is_raised():
    work = Work()

    async def main():
        with pytest.raises(ValueError, match="bad failed"):
            await together([work("slow", 10), work("bad", 0.01, fail=True), work("quick", 0.0), work("late", 5)])
        return dict(work.ended)  # as it stood the moment together raised

    assert asyncio.run(main()) == {"quick": "done", "bad": "failed", "slow": "cancelled", "late": "cancelled"}


def test_cancelling_the_caller_cancels_every_task():
    work = Work()

    async def main():
        caller = asyncio.ensure_future(together([work("a", 10), work("b", 10)]))
        await asyncio.sleep(0.01)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        return dict(work.ended)

    assert asyncio.run(main()) == {"a": "cancelled", "b": "cancelled"}


def test_later_failures_are_not_left_unretrieved():
    """Two tasks failing at once: the second's exception is retrieved, so asyncio logs no 'never retrieved'."""
    complaints = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: complaints.append(context))
        work = Work()
        with pytest.raises(ValueError):
            await together([work("one", 0.01, fail=True), work("two", 0.01, fail=True)])

    asyncio.run(main())
    gc.collect()
    assert not complaints
