"""Adaptive concurrency: how many calls one deployment (a model at an endpoint) takes at once, learnt from its
replies, so a command runs as fast as the provider allows without a flag and without a storm of 429s.

Each deployment has a `Window`, additive increase and multiplicative decrease (AIMD) with a slow start, as TCP
finds a link's capacity:
- it opens at `START` calls in flight; a reply that came back while the window was full (or calls wait) widens
  it until the first sign of overload, then by one per round trip: by `GROWTH` when it was quick with as many
  calls in flight as ever (the window grows eightfold each round trip), else by one (it doubles);
- calls beyond the most the deployment has answered at once (`proven`) are let in one at a time, spread over
  the quickest round trip (`GROWTH` times `proven` of them in it, as fast as slow start grows): a refusal, which
  comes back sooner than an answer, is then heard after a call or two too many, not a round trip's worth;
- a refusal for load (429, 503, 529) is remembered with the calls that were in flight with it: the limit is
  below them, so the window shrinks to one under them; a refusal with fewer in flight than the last one says the
  limit is not (only) calls in flight (a rate, a quota), and halves the window. Either at most once per round
  trip (the replies to calls sent before the cut tell nothing new). The refused call waits its Retry-After
  (retry.py); the deployment's other calls go on, unless the window is down to one call: then a refusal is no
  longer about calls in flight, and its Retry-After holds the whole deployment back;
- past the calls in flight a refusal came with, the window grows only after `PROBE` round trips' worth of
  replies without a refusal (times the seconds of its Retry-After, which a refused probe costs its call), twice
  as many after each refusal there: a limit found is not sought again and again;
- latency more than `SLOWER` times the quickest recent reply means the server queues the calls: the window
  narrows by a tenth, at most once per round trip, never below `START` (replies of different lengths take
  different times, so latency alone must not throttle a command below where it began).
Calls waiting for a place are let in as limits.py's `Queue` orders them (by their sample's place). The models of
a server on this machine or a private network share its window (`own_server`): one machine's capacity serves them.
A window never passes `CEILING`, and declared rpm/tpm (limits.py) and a fixed `--concurrency` still bound the
calls; a fixed `--concurrency` turns the windows off. The ledger keeps each window's size over time.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from .faults import Failure
from .limits import Queue

START = 8  # calls in flight a deployment is first trusted with
GROWTH = 7  # what a reply to a full window adds to it in slow start, when quick at the most calls in flight yet
QUICK = 1.25  # a reply within this many times the quickest recent one is quick: the server did not queue it
CEILING = 256  # calls in flight one deployment is ever given
SLOWER = 2.0  # smoothed latency over the quickest recent reply that means the server queues our calls
OVERLOAD = frozenset({429, 503, 529})  # statuses that mean "too many at once", not "this request is wrong"
RECENT = 64  # replies the quickest latency is taken over (a server that slows for good is learnt again)
PROBE = 32  # round trips' worth of replies before the window grows past where a refusal came again


def overloaded(failure: Failure) -> bool:
    """Whether a failed attempt says the deployment has too much to do (rather than that the call is wrong)."""
    return failure.status in OVERLOAD or failure.error == "RateLimitError"


@dataclass(frozen=True)
class Ticket:
    """A call's place in its window: when it was let in (`number`, counted per window), whether the window was
    full then (only such a call's reply shows the window could be wider) and the calls in flight with it."""

    number: int
    full: bool
    level: int


class Window:
    """One deployment's calls in flight: at most `size`, the others wait in order."""

    def __init__(self, record: Callable[[int], None], start: int = START, ceiling: int = CEILING, name: str = ""):
        self.name = name  # the deployment's, as the ledger names it
        self.limit = float(min(start, ceiling))  # fractional while it grows by one per round trip
        self.start, self.ceiling = self.limit, ceiling
        self.threshold = float(ceiling)  # slow start until the first sign of overload
        self.in_flight = 0
        self.proven = int(self.limit)  # the most calls in flight the deployment answered (trusted at first)
        self.probed_at = float("-inf")  # time.monotonic() when a call beyond `proven` was last let in
        self.timer: asyncio.TimerHandle | None = None  # wakes the next probe
        self.let_in = 0  # calls let in so far
        self.narrowed_at = 0  # calls let in when the window last narrowed
        self.paused_until = 0.0  # time.monotonic() before which no call is let in (Retry-After)
        self.refused_at: int | None = None  # calls in flight with the last refusal: the limit is below them
        self.probe_after = float(PROBE)  # round trips' worth of replies before the window grows to `refused_at`
        self.replies = 0  # replies since the last refusal
        self.latencies: deque[float] = deque(maxlen=RECENT)
        self.smoothed: float | None = None
        self.waiting = Queue()
        self.record = record  # told each new whole size
        record(self.size)

    @property
    def size(self) -> int:
        return max(1, int(self.limit))

    async def acquire(self) -> Ticket:
        """Wait for room, then hold a place: release it with `succeeded`, `refused` or `released`."""
        if self.waiting or not self._room():
            entry = self.waiting.join()
            turn = entry[2]
            try:
                number, level = await turn  # `_wake` counts the call in before it wakes it
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():  # woken, then cancelled: its place goes to the next
                    self.in_flight -= 1
                    self._wake()
                else:
                    self.waiting.leave(entry)
                raise
            full = True  # it waited: the window, not the calls, set the pace
        else:
            number, level = self._let_in()
            full = level >= self.size
        return Ticket(number, full, level)

    def succeeded(self, ticket: Ticket, latency: float) -> None:
        """A reply came back after `latency` seconds: widen while it is quick, narrow when the server queues."""
        self.latencies.append(latency)
        self.smoothed = latency if self.smoothed is None else 0.8 * self.smoothed + 0.2 * latency
        # a quick answer with as many calls in flight as ever: the server took them all at once
        proof = ticket.level >= self.proven and latency <= QUICK * min(self.latencies)
        self.proven = max(self.proven, ticket.level)
        if self.smoothed > SLOWER * min(self.latencies) and self.limit > self.start:
            self._narrow(ticket, min(self.limit, ticket.level) * 0.9, self.start)
        elif (ticket.full or self.waiting) and self.limit < self.ceiling and self._may_grow():
            before = self.size
            grow = (GROWTH if proof else 1.0) if self.limit < self.threshold else 1.0 / self.limit
            top = self.threshold if self.limit < self.threshold else self.ceiling
            if self.refused_at is not None and not self._probing():  # stay under where the last refusal came
                top = min(top, self.refused_at - 1.0)
            self.limit = min(self.limit + grow, top)
            if self.size != before:
                self.record(self.size)
        self.replies += 1
        self.released()

    def _may_grow(self) -> bool:
        """Whether a reply may widen the window: always below where the last refusal came, past it rarely."""
        return self.refused_at is None or self.size + 1 < self.refused_at or self._probing()

    def _probing(self) -> bool:
        """Whether enough replies came since the last refusal to seek past where it came."""
        return self.replies >= self.probe_after * self.size

    def refused(self, ticket: Ticket, retry_after: float | None) -> None:
        """The deployment refused the call for load: shrink under the calls in flight with it (halve when fewer
        than last time were refused), and hold the deployment back for a Retry-After once down to one call."""
        self.proven = min(self.proven, ticket.level - 1)
        alone = self.size <= 1
        if ticket.number > self.narrowed_at:  # a call sent after the last cut: news
            fewer = self.refused_at is not None and ticket.level < self.refused_at
            if fewer:  # not a fixed number of calls in flight (a rate, a limit shared with others): forget it
                self.refused_at, self.probe_after = None, float(PROBE)
            else:  # a probe costs its call the Retry-After: the dearer that is, the rarer the probes
                dearer = PROBE * max(1.0, retry_after or 0.0)
                again = 2 * self.probe_after if self.refused_at is not None else 0.0  # refused there again
                at = ticket.level if self.refused_at is None else min(self.refused_at, ticket.level)
                self.refused_at, self.probe_after = at, min(max(dearer, again), 64 * PROBE)
            self.replies = 0
            self._narrow(ticket, min(self.limit, ticket.level) * 0.5 if fewer else ticket.level - 1.0, 1.0)
        if retry_after and alone:
            self.paused_until = max(self.paused_until, time.monotonic() + retry_after)
            asyncio.get_running_loop().call_later(retry_after, self._wake)
        self.released()

    def released(self) -> None:
        """A call is done (or failed otherwise): its place goes to the next waiting one."""
        self.in_flight -= 1
        self._wake()

    def _narrow(self, ticket: Ticket, to: float, floor: float) -> None:
        if ticket.number <= self.narrowed_at:  # sent before the last cut: it says nothing the cut did not hear
            return
        self.limit = self.threshold = max(floor, min(self.limit, to))
        self.narrowed_at = self.let_in
        self.record(self.size)

    def _room(self) -> bool:
        """Whether a call may be let in now: the window has room, no Retry-After holds it, and a call beyond what
        the deployment has answered at once waits its turn after the last such one."""
        now = time.monotonic()
        if self.in_flight >= self.size or now < self.paused_until:
            return False
        return self.in_flight < self.proven or now >= self.probed_at + self.gap

    @property
    def gap(self) -> float:
        """Seconds between calls let in beyond `proven`."""
        return min(self.latencies, default=0.0) / (GROWTH * max(1, self.proven))

    def _let_in(self) -> tuple[int, int]:
        """Count a call in: its number (a cut after it was let in hears of it), and the calls in flight with it."""
        if self.in_flight >= self.proven:
            self.probed_at = time.monotonic()
        self.in_flight += 1
        self.let_in += 1
        return self.let_in, self.in_flight

    def _wake(self) -> None:
        while self.waiting and self._room():
            turn = self.waiting.next()
            if turn is not None:
                turn.set_result(self._let_in())
        paced = self.waiting and self.in_flight < self.size and time.monotonic() >= self.paused_until
        if paced and self.timer is None:  # held back only to pace the probes: wake when the next may go

            def wake() -> None:
                self.timer = None
                self._wake()

            self.timer = asyncio.get_running_loop().call_later(self.gap, wake)


def own_server(endpoint: str | None) -> bool:
    """Whether an endpoint is a server on this machine or a private network (vLLM, llama-server, a proxy): every
    model it serves shares its capacity, so they share one window. A provider's public endpoint limits each
    model on its own, and each gets its own window."""
    host = urlsplit(endpoint or "").hostname
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private


class Windows:
    """The window of each deployment, per event loop (a waiting call's future belongs to one loop); `record(name,
    size)` is told each window's every new size (the ledger keeps them)."""

    def __init__(self, record: Callable[[str, int], None]) -> None:
        self._loops: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loop -> {deployment: Window}
        self.record = record

    def of(self, model: str, endpoint: str | None) -> Window:
        windows = self._loops.setdefault(asyncio.get_running_loop(), {})
        name = (endpoint if own_server(endpoint) else f"{model} at {endpoint}") if endpoint else model
        if name not in windows:
            windows[name] = Window(lambda size: self.record(name, size), name=name)
        return windows[name]
