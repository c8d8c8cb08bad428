"""Identical calls in flight, made once: a caller asking what another is already asking waits for the
same answer instead of paying for it again."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class _Shared(Generic[T]):
    """A call in flight and how many callers wait for it: one caller leaving (a client that hung up) must not
    cancel it for the others; the last one leaving does."""

    task: asyncio.Future[T]
    waiting: int = 0


class InFlight(Generic[T]):
    def __init__(self) -> None:
        self._calls: dict[str, _Shared[T]] = {}

    def __contains__(self, key: str) -> bool:
        """Whether a call with this key is on its way (joining it then shares its answer)."""
        return key in self._calls

    async def join(self, key: str, start: Callable[[], Awaitable[T]]) -> T:
        """The answer of the call `key`, started with `start()` unless it is already in flight."""
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = _Shared(asyncio.ensure_future(start()))
            call.task.add_done_callback(lambda task: self._settle(key, task))
        call.waiting += 1
        try:
            return await asyncio.shield(call.task)
        finally:
            call.waiting -= 1
            if not call.waiting and not call.task.done():  # the last caller left: nobody wants the answer
                call.task.cancel()
                await asyncio.wait([call.task])  # its request is closed before this caller is done

    def _settle(self, key: str, task: asyncio.Future[T]) -> None:
        del self._calls[key]
        if not task.cancelled():
            task.exception()  # retrieved: every caller may have left before it failed
