"""Bounds kept before sending: calls in flight at once (`Slots`), and rate limits, at most `rpm`
requests and `tpm` tokens in any 60 seconds (`RateLimit`, one per model and endpoint: `RateLimits`).

Calls waiting for a place, here or in an adaptive window, go in by `PRIORITY`, lowest first, then in order of
arrival (`Queue`): an evaluation gives each call its sample's place, so the samples at its front finish first
(an error draw or a gate reads them first), and calls outside one (backward and optimizer questions) go before
any sample's.

A key with a rate limit answers a burst with a storm of 429s; waiting here instead costs nothing
and keeps the server's counters clean. The window slides: a request waits until the oldest one in
the last minute is a minute old. Tokens are counted as the replies report them (prompt plus
completion), so a `tpm` limit holds back the next request once the last minute's replies reach it.
"""

from __future__ import annotations

import asyncio
import heapq
import time
import weakref
from collections import deque
from collections.abc import Mapping
from contextvars import ContextVar

WINDOW = 60.0  # seconds
PRIORITY: ContextVar[int] = ContextVar("sbpc_call_priority", default=0)  # a waiting call's turn: lowest first


class Queue:
    """Calls waiting for a place, let in by `PRIORITY`, then in order of arrival. A turn is a future the one who
    lets a call in resolves (with what it tells the call); a call that leaves while waiting takes its out."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future]] = []
        self._arrived = 0

    def __bool__(self) -> bool:
        return bool(self._heap)

    def join(self) -> tuple[int, int, asyncio.Future]:
        self._arrived += 1
        entry = (PRIORITY.get(), self._arrived, asyncio.get_running_loop().create_future())
        heapq.heappush(self._heap, entry)
        return entry

    def leave(self, entry: tuple[int, int, asyncio.Future]) -> None:
        if entry in self._heap:
            self._heap.remove(entry)
            heapq.heapify(self._heap)

    def next(self) -> asyncio.Future | None:
        """The next call's turn still waited for (None: no call waits)."""
        while self._heap:
            _, _, turn = heapq.heappop(self._heap)
            if not turn.done():
                return turn
        return None


class Turns:
    """At most `value` holders at once, as `asyncio.Semaphore`, its waiters let in as `Queue` orders them."""

    def __init__(self, value: int) -> None:
        self.value = value
        self.waiting = Queue()

    async def __aenter__(self) -> None:
        if self.value > 0 and not self.waiting:
            self.value -= 1
            return
        entry = self.waiting.join()
        try:
            await entry[2]  # `__aexit__` hands its place over
        except asyncio.CancelledError:
            if entry[2].done() and not entry[2].cancelled():  # handed over, then cancelled: pass it on
                self._release()
            else:
                self.waiting.leave(entry)
            raise

    async def __aexit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        turn = self.waiting.next()
        if turn is None:
            self.value += 1
        else:
            turn.set_result(None)


class RateLimit:
    def __init__(self, rpm: int | None = None, tpm: int | None = None):
        self.rpm, self.tpm = rpm, tpm
        self.sent: deque[float] = deque()  # when each request of the last minute was sent
        self.used: deque[tuple[float, int]] = deque()  # (when, tokens) of the last minute's replies

    async def acquire(self) -> None:
        """Wait until one more request fits in the last minute, then count it as sent.

        No lock (it would belong to one event loop): between two awaits the check and the count are atomic."""
        while True:
            now = time.monotonic()
            while self.sent and self.sent[0] <= now - WINDOW:
                self.sent.popleft()
            while self.used and self.used[0][0] <= now - WINDOW:
                self.used.popleft()
            waits = []
            if self.rpm and len(self.sent) >= self.rpm:
                waits.append(self.sent[0] + WINDOW - now)
            if self.tpm and sum(tokens for _, tokens in self.used) >= self.tpm:
                waits.append(self.used[0][0] + WINDOW - now)
            if not waits:
                self.sent.append(now)
                return
            await asyncio.sleep(max(min(waits), 0.001))

    def spent(self, tokens: int) -> None:
        if self.tpm and tokens:
            self.used.append((time.monotonic(), tokens))


class RateLimits:
    """The rate limit of each model and endpoint a model block sets `rpm` or `tpm` for, shared by every
    event loop (a window is time, not a loop's object)."""

    def __init__(self) -> None:
        self._windows: dict[tuple, RateLimit] = {}

    def get(self, model: str, endpoint: str | None, limits: Mapping[str, int]) -> RateLimit | None:
        if not (limits.get("rpm") or limits.get("tpm")):
            return None
        return self._windows.setdefault((model, endpoint), RateLimit(limits.get("rpm"), limits.get("tpm")))


class Slots:
    """Calls in flight at once: at most `concurrency` in all (None: no fixed bound, adaptive.py's windows bound
    them), and at most a model block's own `concurrency` for its model (a role's, or a named one). A waiting
    call's future belongs to one event loop, so each loop gets its own."""

    def __init__(self, concurrency: int | None):
        self.concurrency = concurrency
        self._loops: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loop -> {model or "": its Turns}

    def of(self, model: str, limit: int | None) -> tuple[Turns, Turns]:
        """This loop's slots of `model` (bounded by the first `limit` given here) and of all calls: hold both."""
        slots = self._loops.setdefault(asyncio.get_running_loop(), {"": Turns(self.concurrency or 1 << 30)})
        return slots.setdefault(model, Turns(int(limit or 1 << 30))), slots[""]
