"""Which failed calls are tried again, and when: transient failures only (see faults.py), after the
server's Retry-After (at most faults.MAX_RETRY_AFTER) or else an exponential backoff with jitter, so many
callers do not retry in step."""

from __future__ import annotations

import random
from dataclasses import dataclass

from . import faults
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
            return bounded(failure.retry_after)
        return self.backoff * 2**attempt * random.uniform(0.5, 1.5)


def bounded(retry_after: float) -> float:
    """The wait a Retry-After gets: as asked, up to faults.MAX_RETRY_AFTER."""
    return min(retry_after, faults.MAX_RETRY_AFTER)


def beyond_waiting(failure: Failure) -> bool:
    """Whether the server asked for a longer wait than a call is ever given (it may ask for days)."""
    return failure.retry_after is not None and failure.retry_after > faults.MAX_RETRY_AFTER


#: A call whose retries happen elsewhere (a router file's own `num_retries`): its failure is final.
NO_RETRIES = Retries(0, 0.0)
