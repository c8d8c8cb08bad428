"""Which failed calls are tried again, and when: transient failures only (see faults.py), after the
server's Retry-After or else an exponential backoff with jitter, so many callers do not retry in step."""

from __future__ import annotations

import random
from dataclasses import dataclass

from .faults import TRANSIENT, Failure

BACKOFF = 1.0  # seconds before the first retry; doubled for each next one


@dataclass(frozen=True)
class Retries:
    retries: int  # attempts after the first
    backoff: float

    def wait(self, failure: Failure, attempt: int) -> float | None:
        """Seconds to wait before another try after `attempt` (0: the first) failed; None: no more tries."""
        if failure.kind != TRANSIENT or attempt >= self.retries:
            return None
        if failure.retry_after is not None:
            return failure.retry_after
        return self.backoff * 2**attempt * random.uniform(0.5, 1.5)


#: A call whose retries happen elsewhere (a router file's own `num_retries`): its failure is final.
NO_RETRIES = Retries(0, 0.0)
