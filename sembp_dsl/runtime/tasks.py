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


async def streamed(work: Iterable[Awaitable[object]], most: int) -> None:
    """Run the awaitables with at most `most` at a time, each started an event-loop turn after the one before
    (as `together(apart=True)`), keeping nothing of a finished one: their results are theirs to hand on, so a
    million of them take the memory of `most`. The first failure cancels the rest and is raised, as `together`."""
    running: set[asyncio.Future[object]] = set()
    failed: list[asyncio.Future[object]] = []
    freed = asyncio.Event()

    def finished(task: asyncio.Future[object]) -> None:
        running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            failed.append(task)
        freed.set()

    async def room(left: int) -> None:
        """Wait until at most `left` run, or one failed (raised)."""
        while len(running) > left and not failed:
            freed.clear()
            await freed.wait()
        if failed:
            failed[0].result()

    try:
        for w in work:
            await room(most - 1)
            started = asyncio.ensure_future(w)
            started.add_done_callback(finished)
            running.add(started)
            await asyncio.sleep(0)
        await room(0)
    except BaseException:
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        raise
