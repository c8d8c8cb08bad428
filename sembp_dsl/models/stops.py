"""When model calls must stop: a budget is spent, or the session turned out unable to work.

A failure no request can get past (no key, unknown model, nothing listening) stops the session at once;
so do the first calls of a session when they all fail for good for the same reason: a run that cannot
work says why instead of scoring every sample wrong. Once stopped, every later call fails at once.
"""

from __future__ import annotations

from ..language.diagnostics import Option, OptionError, option, worded
from ..language.graph import ModelSpec
from .faults import Failure, LLMError
from .ledger import Ledger

STOP_AFTER = 3  # calls failed for good for the same reason, none succeeded yet: the command cannot work


class BudgetExceeded(OptionError):
    """max_calls or max_cost (--max-calls, --max-cost) was reached; the run stops cleanly with what it has."""


class Stops:
    def __init__(self, ledger: Ledger, max_calls: int | None = None, max_cost: float | None = None):
        self.ledger, self.max_calls, self.max_cost = ledger, max_calls, max_cost
        self.succeeded = 0  # calls answered in this session: until one is, failures may mean "cannot work"
        self.stopped: Option | None = None  # why this session cannot work
        self._given_up: dict[str, int] = {}  # calls failed for good before any succeeded, by cause

    def check_budget(self) -> None:
        if self.max_calls is not None and self.ledger.calls >= self.max_calls:
            raise BudgetExceeded(option("max_calls", self.max_calls), " reached")
        if self.max_cost is not None and self.ledger.cost >= self.max_cost:
            raise BudgetExceeded(option("max_cost", self.max_cost), f" reached (spent ${self.ledger.cost:.4f})")

    def check_working(self) -> None:
        """Calls still queued when the session was found unable to work fail with its reason."""
        if self.stopped:
            raise LLMError(self.stopped)

    def answered(self) -> None:
        self.succeeded += 1

    def cannot_work(self, role: str, spec: ModelSpec, failure: Failure) -> LLMError:
        """A failure no request can get past: the session stops, with this reason."""
        self.stopped = self.stopped or worded(f"{role} model '{spec.name}': ", failure.describe())
        return LLMError(self.stopped)

    def gave_up(self, role: str, spec: ModelSpec, failure: Failure) -> None:
        """A call failed for good: when the first calls of the session all did, for the same reason, stop."""
        if self.succeeded:
            return
        seen = self._given_up[failure.cause] = self._given_up.get(failure.cause, 0) + 1
        if seen >= STOP_AFTER:
            self.stopped = self.stopped or worded(
                f"{role} model '{spec.name}': the first {seen} calls all failed: ", failure.describe()
            )
            raise LLMError(self.stopped)
