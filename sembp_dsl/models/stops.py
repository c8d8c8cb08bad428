"""When model calls must stop: a budget is spent, or a command turned out unable to work.

Within one batch command (eval, optimize, compare: a `command()`), a failure no request can get past (no
key, unknown model, nothing listening) stops the command at once; so do its first calls when they all
fail for good for the same reason: a run that cannot work says why instead of scoring every sample wrong.
Once stopped, every later call of that command fails at once. Models on trial (`trying`: an optimize run's
move to a model it has not used) are the exception: such a failure fails that model's calls, not the command. A
call outside any command (a request to
`sbpc serve`, a direct call of a long-lived Pipeline) fails alone: the next one tries again, since the
server may be back and one client's bad inputs are no reason to refuse another's.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from ..errors import Option, OptionError, option, worded
from ..language.graph.graph import ModelSpec
from . import faults
from .faults import Failure, LLMError
from .ledger import Ledger

STOP_AFTER = 3  # calls failed for good for the same reason, none succeeded yet: the command cannot work


def refusing(asked: float, waited: float) -> str:
    """Why a server that asks for a wait past what a call is given stops the command: its words for it."""
    return (
        f"; no call answered for {waited:.0f} s, and the server asks to wait "
        f"{duration(asked)}, longer than a call waits: try again later, or raise the provider's limit"
    )


def duration(seconds: float) -> str:
    """A wait in the unit a reader thinks of it in: '45 s', '20 min', '27 h', '1157 days'."""
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= 2 * size:
            return f"{seconds / size:.0f} {unit}" if seconds < 1e15 else "forever"
    return f"{seconds:.0f} s"


class BudgetExceeded(OptionError):
    """max_calls or max_cost (--max-calls, --max-cost) was reached; the run stops cleanly with what it has."""


@dataclass
class _Command:
    """What one batch command has seen of its calls."""

    succeeded: int = 0  # calls answered: until one is, failures may mean "cannot work"
    stopped: Option | None = None  # why this command cannot work
    given_up: dict[str, int] = field(default_factory=dict)  # calls failed for good before any succeeded, by cause


class Stops:
    """Budgets for a session, and the stop-early rule for each batch command in it. `whole_session`: the
    session is itself one command (an LLM layer a command made for itself), rather than a long-lived one
    whose batch commands each open their own `command()`."""

    def __init__(
        self, ledger: Ledger, max_calls: int | None = None, max_cost: float | None = None, whole_session: bool = True
    ):
        self.ledger, self.max_calls, self.max_cost = ledger, max_calls, max_cost
        self.succeeded = 0  # calls answered in this session: a refused connection after one is a restart
        self._refusing_since: float | None = None  # time.monotonic() of the first refusal past waiting since an answer
        self._session = _Command() if whole_session else None
        self._command: ContextVar[_Command | None] = ContextVar("sbpc_command", default=None)
        self._trial: ContextVar[frozenset[str]] = ContextVar("sbpc_trial", default=frozenset())

    @property
    def stopped(self) -> Option | None:
        """Why the current command cannot work (None: it can, or no command is running)."""
        current = self._current()
        return current.stopped if current else None

    def _current(self) -> _Command | None:
        return self._command.get() or self._session

    @contextmanager
    def command(self) -> Iterator[None]:
        """The calls made in this block (and in the tasks it starts) are one batch command, unless they
        already are part of one (evaluations inside an optimize run)."""
        if self._current() is not None:
            yield
            return
        token = self._command.set(_Command())
        try:
            yield
        finally:
            self._command.reset(token)

    @contextmanager
    def trying(self, models: Collection[str]) -> Iterator[None]:
        """Calls made in this block (and in the tasks it starts) to these named models are on trial: a failure no
        request can get past fails the call with an LLMError naming the model, and leaves the command working."""
        token = self._trial.set(frozenset(models))
        try:
            yield
        finally:
            self._trial.reset(token)

    def check_budget(self) -> None:
        if self.max_calls is not None and self.ledger.calls >= self.max_calls:
            raise BudgetExceeded(option("max_calls", self.max_calls), " reached")
        if self.max_cost is not None and self.ledger.cost >= self.max_cost:
            raise BudgetExceeded(option("max_cost", self.max_cost), f" reached (spent ${self.ledger.cost:.4f})")

    def check_working(self) -> None:
        """Calls still queued when the command was found unable to work fail with its reason."""
        if self.stopped:
            raise LLMError(self.stopped)

    def answered(self) -> None:
        self.succeeded += 1
        self._refusing_since = None
        current = self._current()
        if current:
            current.succeeded += 1

    def cannot_work(self, role: str, spec: ModelSpec, failure: Failure, why: str = "") -> LLMError:
        """A failure no request can get past: this call fails with it, and a command stops with it. `why`: what
        made a transient failure final, when one did."""
        reason = worded(f"{role} model '{spec.name}': ", failure.describe(), why)
        current = self._current()
        if spec.role in self._trial.get():
            return LLMError(reason, model=spec.role)
        if current is None:
            return LLMError(reason)
        current.stopped = current.stopped or reason
        return LLMError(current.stopped)

    def refused_past_waiting(self, role: str, spec: ModelSpec, failure: Failure) -> None:
        """A refusal that asks for a wait past any call's (a server may ask for days): once such refusals have come
        for a whole capped wait with no call answered, the command cannot work now, and stops with LLMError; a
        server refusing every call would otherwise hold it for hours, a capped wait per call."""
        now = time.monotonic()
        if self._refusing_since is None:
            self._refusing_since = now
        elif now - self._refusing_since >= 0.9 * faults.MAX_RETRY_AFTER:
            self.ledger.add(role, spec.role, failures=1)
            waited = now - self._refusing_since
            raise self.cannot_work(role, spec, failure, refusing(failure.retry_after or 0.0, waited))

    def gave_up(self, role: str, spec: ModelSpec, failure: Failure) -> None:
        """A call failed for good: when the first calls of the command all did, for the same reason, stop (not
        for a model on trial: its failures are its own)."""
        current = self._current()
        if current is None or current.succeeded or spec.role in self._trial.get():
            return
        seen = current.given_up[failure.cause] = current.given_up.get(failure.cause, 0) + 1
        if seen >= STOP_AFTER:
            current.stopped = current.stopped or worded(
                f"{role} model '{spec.name}': the first {seen} calls all failed: ", failure.describe()
            )
            raise LLMError(current.stopped)
