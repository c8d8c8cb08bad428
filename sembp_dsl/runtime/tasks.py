"""Many awaitables at once, all or none: the one way sbpc runs a task per node, sample or row."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

T = TypeVar("T")


async def together(work: Iterable[Awaitable[T]], *, apart: bool = False) -> list[T]:
    """Run every awaitable at once (coroutines become tasks) and return their results in order.

    The first failure cancels the rest and is raised; cancelling the caller cancels them all. Either way
    every task has finished when this returns or raises, so no call goes on for an answer nobody reads.
    `apart`: start each one event-loop turn after the one before, so the first sample's calls leave before the
    hundredth sample's prompts are rendered (started in one turn, a first request waited on all of them).
    """
    tasks: list[asyncio.Future[T]] = []
    try:
        for w in work:
            tasks.append(asyncio.ensure_future(w))
            if apart:
                await asyncio.sleep(0)
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
