"""Rate limits kept before sending: at most `rpm` requests and `tpm` tokens in any 60 seconds.

A key with a rate limit answers a burst with a storm of 429s; waiting here instead costs nothing
and keeps the server's counters clean. The window slides: a request waits until the oldest one in
the last minute is a minute old. Tokens are counted as the replies report them (prompt plus
completion), so a `tpm` limit holds back the next request once the last minute's replies reach it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

WINDOW = 60.0  # seconds


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
