"""What model calls cost, per role and per model: calls, cache hits, tokens, dollars, retries and failures, plus
named counters other stages keep. Several LLM layers (one per event loop) may share one ledger."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from ..language.graph.graph import MODEL_ROLES
from . import prices
from .faults import Failure
from .transport import Reply


@dataclass
class RoleUsage:
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # of the prompt tokens, those the provider's prompt cache served
    cost: float = 0.0
    cache_saving: float = 0.0  # dollars those cached tokens cost less than at the full rate
    retries: int = 0
    failures: int = 0


# where the calls made in this context (and the tasks it starts) are also booked: `Ledger.account`
ACCOUNT: ContextVar[RoleUsage | None] = ContextVar("sbpc_account", default=None)


@dataclass
class Ledger:
    """Calls, tokens, cache hits and cost per role and per model (a role's, or a named one nodes use), plus
    named counters other stages keep. The totals are the roles'."""

    roles: dict[str, RoleUsage] = field(default_factory=lambda: {r: RoleUsage() for r in MODEL_ROLES})
    counters: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)  # failed attempts (retried or not) by cause
    models: dict[str, RoleUsage] = field(default_factory=dict)  # by the pipeline's name for the model
    names: dict[str, str] = field(default_factory=dict)  # the pipeline's name for a model -> its model string
    # per deployment (adaptive.py), its window's size at each change: (seconds since the first window opened, size)
    concurrency: dict[str, list[tuple[float, int]]] = field(default_factory=dict)
    refusals: dict[str, list[float]] = field(default_factory=dict)  # per deployment, when it refused for load
    began: float | None = None  # time.monotonic() when the first window opened

    def add(self, role: str, model: str, **amounts: float) -> None:
        """Count a call's calls, hits, retries or failures for its role (a judge's is counted once it calls) and
        for its model."""
        account = ACCOUNT.get()
        usages = (self.roles.setdefault(role, RoleUsage()), self.models.setdefault(model, RoleUsage()))
        for usage in (*usages, account) if account is not None else usages:
            for name, amount in amounts.items():
                setattr(usage, name, getattr(usage, name) + amount)

    @staticmethod
    @contextmanager
    def account() -> Iterator[RoleUsage]:
        """What the calls made in this context, and in the tasks it starts, spend, apart from work that runs
        beside it (an optimize iteration's own, not the initial score's): booked here as well as by role."""
        usage = RoleUsage()
        token = ACCOUNT.set(usage)
        try:
            yield usage
        finally:
            ACCOUNT.reset(token)

    @property
    def calls(self) -> int:
        return sum(u.calls for u in self.roles.values())

    @property
    def cost(self) -> float:
        return sum(u.cost for u in self.roles.values())

    @property
    def tokens(self) -> int:
        return sum(u.prompt_tokens + u.completion_tokens for u in self.roles.values())

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + n

    def _since(self) -> float:
        """Seconds since the first window opened (now, when none has)."""
        now = time.monotonic()
        if self.began is None:
            self.began = now
        return round(now - self.began, 3)

    def window(self, deployment: str, size: int) -> None:
        """A deployment's adaptive window is now `size` calls wide."""
        at = self._since()
        sizes = self.concurrency.setdefault(deployment, [])
        if not sizes or sizes[-1][1] != size:
            sizes.append((at, size))

    def refused(self, deployment: str) -> None:
        """A deployment refused a call for load (429, 503, 529): when, beside its window's sizes."""
        self.refusals.setdefault(deployment, []).append(self._since())

    def fault(self, failure: Failure) -> None:
        self.faults[failure.cause] = self.faults.get(failure.cause, 0) + 1

    def charge(self, role: str, model: str, reply: Reply, priced_as: str | None = None) -> float:
        """Book a reply's tokens and cost to `role` and `model`; the cost (0 when litellm's price table does not
        know the model, which is counted: max_cost cannot see such calls). `priced_as`: the model litellm's table
        priced it at (None for a declared price, which has no cached rate), for what its cached tokens saved."""
        if reply.cost is None:
            self.count("calls without a known price")
        cost = float(reply.cost or 0.0)
        full = None  # what the reply would have cost with no token from the provider's cache
        if reply.cached_tokens and priced_as and reply.cost is not None:
            full = prices.cost(priced_as, reply.prompt_tokens, reply.completion_tokens)
        self.add(
            role,
            model,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            cached_tokens=reply.cached_tokens,
            cost=cost,
            cache_saving=max(0.0, full - cost) if full is not None else 0.0,
        )
        return cost

    def to_json(self) -> dict:
        return {
            "roles": {r: vars(u).copy() for r, u in self.roles.items()},
            "models": {m: vars(u).copy() for m, u in self.models.items()},
            "counters": dict(self.counters),
            "faults": dict(self.faults),
            "calls": self.calls,
            "tokens": self.tokens,
            "cached_tokens": sum(u.cached_tokens for u in self.roles.values()),
            "cache_saving": sum(u.cache_saving for u in self.roles.values()),
            "cost": self.cost,
            # over time, in seconds since the first window opened (lists, so several sessions' are concatenated)
            **(
                {"concurrency": {d: [list(p) for p in s] for d, s in self.concurrency.items()}}
                if self.concurrency
                else {}
            ),
            **({"refusals": {d: list(times) for d, times in self.refusals.items()}} if self.refusals else {}),
        }

    def render(self) -> str:
        def header(first: str) -> str:
            return (
                f"{first:<10} {'calls':>6} {'cached':>7} {'retries':>8} {'failed':>7} {'prompt tok':>11} "
                f"{'compl. tok':>11} {'cost $':>9}"
            )

        def row(name: str, usages: list[RoleUsage]) -> str:
            total = lambda attr: sum(getattr(u, attr) for u in usages)  # noqa: E731
            return (
                f"{name:<10} {total('calls'):>6} {total('cache_hits'):>7} {total('retries'):>8} {total('failures'):>7} "
                f"{total('prompt_tokens'):>11} {total('completion_tokens'):>11} {total('cost'):>9.4f}"
            )

        lines = [header("role")]
        lines += [row(role, [u]) for role, u in self.roles.items() if u.calls or u.cache_hits]
        lines.append(row("total", list(self.roles.values())))
        if set(self.models) - set(MODEL_ROLES):  # nodes with models of their own: what each model did
            lines.append(header("model"))
            lines += [
                f"{row(model, [u])}  {self.names.get(model, '')}"
                for model, u in self.models.items()
                if u.calls or u.cache_hits
            ]
        cached = sum(u.cached_tokens for u in self.roles.values())
        if cached:
            prompt = sum(u.prompt_tokens for u in self.roles.values())
            saving = sum(u.cache_saving for u in self.roles.values())
            less = f", at its cached rate: ${saving:.4f} less than at the full rate" if saving else ""
            lines.append(
                f"prompt tokens the provider's cache served: {cached} of {prompt} ({cached / prompt:.0%}){less}"
            )
        lines += [f"{name}: {value}" for name, value in sorted(self.counters.items())]
        lines += [f"failed attempts, {cause}: {n}" for cause, n in sorted(self.faults.items())]
        return "\n".join(lines)
