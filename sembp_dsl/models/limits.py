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
import re
import time
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import NamedTuple

from ..language.messages import Message

WINDOW = 60.0  # seconds
RECHECK = 0.25  # seconds a call held by the rate-limit headers waits before it reads them again
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


class Quota(NamedTuple):
    """What a provider's rate-limit headers say is left of its limits (OpenAI's `x-ratelimit-remaining-requests`,
    `-tokens` and their `x-ratelimit-reset-*`): None where a header is absent."""

    requests: int | None
    tokens: int | None
    requests_reset: float | None  # seconds until the requests' limit is whole again
    tokens_reset: float | None
    requests_limit: int | None = None  # what is left once whole (`x-ratelimit-limit-*`)
    tokens_limit: int | None = None


def quota(headers: Mapping[str, str]) -> Quota | None:
    """The rate-limit headers of a reply, or None when it sent none."""
    lower = {str(k).lower(): str(v) for k, v in headers.items() if str(k).lower().startswith("x-ratelimit-")}
    if not lower:
        return None
    return Quota(
        _count(lower.get("x-ratelimit-remaining-requests")),
        _count(lower.get("x-ratelimit-remaining-tokens")),
        _seconds(lower.get("x-ratelimit-reset-requests")),
        _seconds(lower.get("x-ratelimit-reset-tokens")),
        _count(lower.get("x-ratelimit-limit-requests")),
        _count(lower.get("x-ratelimit-limit-tokens")),
    )


def _count(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdigit() else None


DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(text: str | None) -> float | None:
    """A reset time as OpenAI writes it ("20ms", "1.5s", "6m0s") or bare seconds; None when unreadable."""
    text = (text or "").strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        parts = DURATION.findall(text)
        if not parts or "".join(n + u for n, u in parts) != text:
            return None
        return sum(float(n) * UNIT[u] for n, u in parts)


class Allowance:
    """What a deployment's rate-limit headers left, spent down by the calls sent since: a call that would pass what
    is left waits for its reset, so a tokens- or requests-per-minute limit is met before it refuses. A call's
    tokens are guessed from its prompt (`guess`); the next reply's headers correct the guess."""

    def __init__(self) -> None:
        self.tokens: float | None = None  # left, as the last reply said, less the guesses of calls sent since
        self.requests: float | None = None
        self.tokens_whole = self.requests_whole = 0.0  # time.monotonic() when each limit is whole again
        self.tokens_limit: int | None = None  # what is left when whole (None: unknown until a reply says)
        self.requests_limit: int | None = None

    def note(self, left: Quota) -> None:
        now = time.monotonic()
        if left.tokens is not None:
            self.tokens, self.tokens_limit = float(left.tokens), left.tokens_limit
            self.tokens_whole = now + (left.tokens_reset or 0.0)
        if left.requests is not None:
            self.requests, self.requests_limit = float(left.requests), left.requests_limit
            self.requests_whole = now + (left.requests_reset or 0.0)

    async def acquire(self, tokens: int) -> None:
        """Wait until the headers' limits have room for one more call of about `tokens`, then count it."""
        while True:
            now = time.monotonic()
            if self.tokens is not None and now >= self.tokens_whole:  # whole again, and spent from there
                self.tokens, self.tokens_whole = _whole(self.tokens_limit), now + WINDOW
            if self.requests is not None and now >= self.requests_whole:
                self.requests, self.requests_whole = _whole(self.requests_limit), now + WINDOW
            waits = []
            if self.tokens is not None and self.tokens < tokens:
                waits.append(self.tokens_whole - now)
            if self.requests is not None and self.requests < 1:
                waits.append(self.requests_whole - now)
            if not waits:
                break
            await asyncio.sleep(min(max(min(waits), 0.001), RECHECK))  # a reply may say more is left sooner
        if self.tokens is not None:
            self.tokens -= tokens
        if self.requests is not None:
            self.requests -= 1


def _whole(limit: int | None) -> float | None:
    return None if limit is None else float(limit)


def guess(messages: Sequence[Message]) -> int:
    """A call's prompt tokens before it is sent: a character count over 4 (English runs about that), rounded up."""
    return sum(len(m.content or "") for m in messages) // 4 + 1


class RateLimits:
    """The rate limit of each model and endpoint a model block sets `rpm` or `tpm` for, shared by every
    event loop (a window is time, not a loop's object)."""

    def __init__(self) -> None:
        self._windows: dict[tuple, RateLimit] = {}
        self._allowances: dict[tuple, Allowance] = {}

    def allowance(self, model: str, endpoint: str | None) -> Allowance:
        """What the rate-limit headers of this model's replies at this endpoint left."""
        return self._allowances.setdefault((model, endpoint), Allowance())

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
