"""Many awaitables at once, all or none: the one way sbpc runs a task per node, sample or row."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")


async def together(work: Iterable[Awaitable[T]]) -> list[T]:
    """Run every awaitable at once (coroutines become tasks) and return their results in order.

    The first failure cancels the rest and is raised; cancelling the caller cancels them all. Either way
    every task has finished when this returns or raises, so no call goes on for an answer nobody reads.
    """
    tasks = [asyncio.ensure_future(w) for w in work]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
