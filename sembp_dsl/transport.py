"""The call path to models: a fast lane for OpenAI-compatible servers, litellm for everything else.

Importing litellm takes seconds (10 s on a loaded 2-core machine), and `litellm.acompletion`
spends about 4 ms of Python per call, which at 64 calls in flight saturates a core. For
`openai/<model>` (any OpenAI-compatible server) `FastPath` sends the request body litellm would
send over one shared aiohttp session, without importing litellm at all: about 0.5 ms per call,
and the first request leaves well within a second of launch. litellm stays the reference: prices
come from its packaged price table (prices.py), failures are named after its exception types
(faults.LITELLM_NAMES). Everything else (other providers, OpenAI's reasoning models whose
parameters litellm rewrites, streaming, unusual parameters, the embedded model) goes to
`litellm.acompletion(..., max_retries=0)`, imported on that first use; our own layer retries.
Behind a litellm Router (`router = FILE`) the Router chooses the deployment and the fast path
sends to it when it is OpenAI-compatible (`load_router`). Measured in bench/litellm_overhead.py,
bench/startup.py and bench/router_throughput.py.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import gc
import json
import os
import re
from typing import Any, NamedTuple, Optional
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp  # noqa: E402  (litellm's own HTTP client library)
from aiohttp.helpers import get_env_proxy_for_url  # noqa: E402
from yarl import URL  # noqa: E402

from . import embedded, prices
from .diagnostics import one_of
from .faults import BadReply, CallError, first_line, mask_secrets, redact

ENV_BASES = ("OPENAI_BASE_URL", "OPENAI_API_BASE")  # where litellm and the OpenAI SDK look, in this order
OPENAI_BASE = "https://api.openai.com/v1"
#: OpenAI models whose parameters litellm rewrites (max_tokens -> max_completion_tokens, no temperature):
#: they take litellm's path.
REWRITTEN = re.compile(r"^(?:o\d|gpt-5)")


class Reply(NamedTuple):
    """A chat completion with text, whichever path it came by."""
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost: Optional[float]  # dollars; None when litellm's price table does not know the model
    finish_reason: Optional[str]  # "length": cut off by max_tokens


class Route(NamedTuple):
    """Where and how a model string is served on the fast path."""
    model: str                    # provider-side model name, e.g. "gpt-4o-mini"
    url: str                      # .../chat/completions, without user:password@
    authorization: Optional[str]  # "Bearer <key>", "Basic ..." from a user:password@, None: no key anywhere
    proxy: Any                    # env proxy for url (HTTP(S)_PROXY / NO_PROXY) or None
    proxy_auth: Any

    def __repr__(self) -> str:  # keep the API key out of logs
        return f"Route(model={self.model!r}, url={self.url!r})"


class FastPath:
    """``litellm.acompletion`` replacement with a cheap, litellm-free path for
    OpenAI-compatible servers; returns a `Reply` either way.

    One instance per event loop's LLM layer; it keeps one aiohttp session per loop.
    """

    #: Request parameters the fast path forwards as they are (the OpenAI
    #: passthrough litellm applies to `openai/` models).
    PARAMS = frozenset({
        "temperature", "top_p", "max_tokens", "max_completion_tokens", "n",
        "stop", "seed", "presence_penalty", "frequency_penalty", "logit_bias",
        "user", "logprobs", "top_logprobs", "response_format", "tools",
        "tool_choice", "parallel_tool_calls", "reasoning_effort",
    })

    def __init__(self, connection_limit: int = 0) -> None:
        self._connection_limit = connection_limit  # 0 = unlimited
        self._sessions: dict = {}
        self._routers: dict = {}  # router config path -> litellm.Router
        self.secrets: dict[str, tuple[str, ...]] = {}  # router config path -> the API keys it holds
        self._groups: dict[str, frozenset[str]] = {}  # router config path -> its model groups and aliases

    # -- public ------------------------------------------------------------
    async def acompletion(self, model: str, messages: list, *,
                          api_base: Optional[str] = None,
                          api_key: Optional[str] = None,
                          timeout: float = 600.0,
                          extra_headers: Optional[dict] = None,
                          router: Optional[str] = None,
                          **params: Any) -> Reply:
        if router:
            return await self._via_router(router, model, messages, timeout, params)
        route = self.route(model, api_base, api_key, params)
        if route is None:
            return await _via_litellm(model, messages, api_base, api_key,
                                      timeout, extra_headers, params)
        return await self.send(route, messages, timeout, extra_headers, params)

    def route(self, model: str, api_base: Optional[str], api_key: Optional[str], params: dict) -> Optional[Route]:
        """Where the fast path sends this call; None: it is litellm's to send."""
        if (params.get("stream") or not self.PARAMS.issuperset(params)
                or isinstance(params.get("response_format"), type)):
            return None
        return _fast_route(model, api_base, api_key, _env_snapshot())

    @staticmethod
    def endpoint(model: str, api_base: Optional[str]) -> Optional[str]:
        """Where calls for this model go, without credentials; None for
        in-process models and providers whose address litellm keeps."""
        return _endpoint(model, api_base, _env_snapshot())

    async def _via_router(self, path: str, model: str, messages: list, timeout: float, params: dict) -> Reply:
        """Through litellm's Router: its deployments, weights, limits, cooldowns and fallbacks."""
        router = self._routers.get(path)
        if router is None:
            config = router_config(path)
            self.secrets[path] = router_secrets(config)
            self._groups[path] = model_groups(config)
            router = self._routers[path] = load_router(path, config, self)
        if model not in self._groups[path]:  # litellm would say "no healthy deployments", once per call
            raise RouterConfigError(f"router config {path}: {one_of(model, 'model group', sorted(self._groups[path]))}")
        response = await router.acompletion(model=model, messages=messages, timeout=timeout, **params)
        return response._hidden_params.get(REPLY) or from_litellm(response, response.model or model)

    async def aclose(self) -> None:
        for session in self._sessions.values():
            await session.close()
        self._sessions.clear()

    # -- internals ---------------------------------------------------------
    def _session(self):
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            # trust_env=False: with it aiohttp does two executor hops per
            # request (netrc + proxy lookup); the proxy is resolved once per
            # route instead (_fast_route).
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connection_limit),
                trust_env=False)
            self._sessions[loop] = session
        return session

    async def send(self, route: Route, messages: list, timeout: float,
                   extra_headers: Optional[dict], params: dict) -> Reply:
        """One request on the fast path; CallError or BadReply when it fails."""
        if route.authorization is None:  # what litellm would say, without importing it to say it
            raise CallError(f"Missing credentials: no API key for {route.model} (OPENAI_API_KEY is not set)",
                            name="AuthenticationError")
        body = {"model": route.model, "messages": messages,
                **{k: v for k, v in params.items() if v is not None}}
        headers = {"Authorization": route.authorization}
        if extra_headers:
            headers.update(extra_headers)
        try:
            async with self._session().post(
                    route.url, json=body, headers=headers,
                    proxy=route.proxy, proxy_auth=route.proxy_auth,
                    timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                payload = await resp.read()
                status, resp_headers, reason = resp.status, dict(resp.headers), resp.reason
        except asyncio.TimeoutError as exc:
            raise CallError(f"Request timed out after {timeout} s", name="Timeout") from exc
        except aiohttp.ClientError as exc:
            raise CallError(str(exc) or type(exc).__name__, name="APIConnectionError") from exc
        if status >= 400:
            raise CallError(_error_message(payload, status, reason), status, resp_headers)
        return _reply(_completion(payload), route.model)


def _env_snapshot() -> tuple:
    """The environment variables a route depends on: part of the memo key,
    so a changed variable is seen at once."""
    return tuple(os.environ.get(name) for name in (*ENV_BASES, "OPENAI_API_KEY"))


def split_credentials(url: str) -> tuple[str, Optional[str]]:
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


def _openai_base(model: str, api_base: Optional[str]) -> Optional[str]:
    """The base URL of an `openai/` model (flag or setting, then the
    environment, then OpenAI's own); None for other providers."""
    if not model.startswith("openai/"):
        return None
    env = os.environ.get
    return api_base or env(ENV_BASES[0]) or env(ENV_BASES[1]) or OPENAI_BASE


@functools.lru_cache(maxsize=1024)
def _endpoint(model: str, api_base: Optional[str], env: tuple) -> Optional[str]:
    base = _openai_base(model, api_base)
    if base is None:
        return redact(api_base)
    return redact(base.rstrip("/") + "/chat/completions")


@functools.lru_cache(maxsize=1024)
def _fast_route(model: str, api_base: Optional[str],
                api_key: Optional[str], env: tuple) -> Optional[Route]:
    """Resolve a model string once per environment; None: litellm's path."""
    base = _openai_base(model, api_base)
    name = model.split("/", 1)[-1]  # "openai/x" -> "x"; a bare name with an api_base is sent as it is
    if base is None or REWRITTEN.match(name):
        return None
    base, basic = split_credentials(base)
    api_key = api_key or os.environ.get("OPENAI_API_KEY")
    url = base.rstrip("/") + "/chat/completions"
    try:
        proxy, proxy_auth = get_env_proxy_for_url(URL(url))
    except LookupError:
        proxy = proxy_auth = None
    authorization = basic or (f"Bearer {api_key}" if api_key else None)
    return Route(name, url, authorization, proxy, proxy_auth)


def _error_message(payload: bytes, status: int, reason: Optional[str]) -> str:
    """The provider's first meaningful line: the JSON error's message, an
    HTML page's title, or the status text."""
    try:
        error = json.loads(payload)["error"]
        text = error["message"] if isinstance(error, dict) else error
    except Exception:
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


def _reply(body: dict, model: str) -> Reply:
    """The text, tokens and price of a chat completion (a dict, or litellm's
    ModelResponse as a dict); BadReply when there is no text (never let such
    a reply be cached as "")."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise BadReply("no choices in the reply" if choices is None else "empty choices in the reply")
    choice = choices[0] if isinstance(choices[0], dict) else {}
    text = (choice.get("message") or {}).get("content")
    if not isinstance(text, str):
        raise BadReply("the reply's content is null")
    usage = body.get("usage") or {}
    prompt_tokens = int(usage.get("prompt_tokens") or 0)
    completion_tokens = int(usage.get("completion_tokens") or 0)
    return Reply(text, prompt_tokens, completion_tokens,
                 prices.cost(model, prompt_tokens, completion_tokens), choice.get("finish_reason"))


@functools.cache
def _litellm():
    """litellm, imported on first need (it takes seconds)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before litellm is imported: no network
    import litellm

    litellm.suppress_debug_info = True  # otherwise litellm prints a banner to stdout with every error
    # litellm leaves ~400k long-lived objects behind: freezing them spares every later GC pass
    # rescanning them (a third of the CPU per call through the Router; bench/router_throughput.py)
    gc.collect()
    gc.freeze()
    return litellm


async def _via_litellm(model: str, messages: list, api_base: Optional[str], api_key: Optional[str],
                       timeout: float, extra_headers: Optional[dict], params: dict) -> Reply:
    litellm = _litellm()
    if embedded.serves(model):
        embedded.register()
    if api_base:
        api_base, basic = split_credentials(api_base)
        if basic:
            extra_headers = {**(extra_headers or {}), "Authorization": basic}
    response = await litellm.acompletion(
        model=model, messages=messages, api_base=api_base, api_key=api_key,
        timeout=timeout, extra_headers=extra_headers, max_retries=0, **params)
    return from_litellm(response, model)


class RouterConfigError(Exception):
    """A router config file that cannot be read or is not a litellm Router config."""


#: Where a Router's reply carries the `Reply` the fast path made of it (one parse, not two).
REPLY = "sbpc_reply"
#: What litellm's Router adds to each call for its own bookkeeping; the fast path has no use for it.
ROUTER_BOOKKEEPING = frozenset({"metadata", "model_info", "litellm_trace_id", "litellm_call_id",
                                "_context_compaction_state", "max_retries"})
#: Router switches the fast path can ignore while they are off; on, litellm sends the call.
ROUTER_SWITCHES = frozenset({"allow_client_keepalive_override", "use_in_pass_through", "use_litellm_proxy",
                             "use_xai_oauth", "merge_reasoning_content_in_choices", "caching", "client", "stream"})


def load_router(path: str, config: dict, fast: FastPath):
    """A `litellm.Router` from a litellm proxy/Router config file (YAML or JSON):
    `model_list` (deployments: `model_name`, `litellm_params` with `model`,
    `api_base`, `api_key` or `os.environ/VAR`, `rpm`, `tpm`, `weight`) and
    `router_settings` (`routing_strategy`, `fallbacks`, `num_retries`, ...).

    The Router chooses, limits, cools down and falls back as it always does; only the request to an
    OpenAI-compatible deployment is sent by `fast` (litellm's own call costs 6 ms of CPU, ours 0.4)."""
    settings = config.get("router_settings") or {}
    if not isinstance(settings, dict):
        raise RouterConfigError(f"router config {path}: `router_settings` must be a mapping")
    _litellm()
    deployments = [d.get("litellm_params") for d in config["model_list"] if isinstance(d, dict)]
    if any(isinstance(params, dict) and embedded.serves(str(params.get("model"))) for params in deployments):
        embedded.register()  # the Router checks every deployment's provider as it is built
    from litellm.router import Router, router_arguments
    from litellm.router_config import build_router_config

    try:
        arguments = router_arguments(model_list=config["model_list"], **{"num_retries": 0, **settings})
        router = Router.from_config(build_router_config(arguments), _sending_host(fast))
    except Exception as exc:  # litellm validates deployments and settings its own way
        message = first_line(mask_secrets(str(exc), router_secrets(config)))  # litellm may quote a deployment
        raise RouterConfigError(f"router config {path}: {type(exc).__name__}: {message}") from None
    return router


#: A router file past these sizes is refused: a few YAML aliases can stand for billions of values,
#: which litellm's Router would copy out in full.
MAX_ROUTER_BYTES = 4 * 2**20
MAX_ROUTER_VALUES = 100_000


def router_config(path: str) -> dict:
    """A router config file read as data (litellm is not needed for it); RouterConfigError when it
    cannot be read, is not a regular file (a FIFO would block), is too large, or has no deployments."""
    import yaml

    if os.path.exists(path) and not os.path.isfile(path):
        raise RouterConfigError(f"router config {path}: not a regular file (a folder, FIFO or device?)")
    try:
        if os.path.getsize(path) > MAX_ROUTER_BYTES:
            raise RouterConfigError(f"router config {path}: larger than {MAX_ROUTER_BYTES // 2**20} MB")
        with open(path, encoding="utf-8") as file:
            config = yaml.safe_load(file)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise RouterConfigError(f"router config {path}: {exc}") from None
    if _values_beyond(config, MAX_ROUTER_VALUES):
        raise RouterConfigError(f"router config {path}: more than {MAX_ROUTER_VALUES:,} values once its "
                                "YAML aliases are expanded")
    if not isinstance(config, dict) or not isinstance(config.get("model_list"), list) or not config["model_list"]:
        raise RouterConfigError(f"router config {path}: expected a mapping with a non-empty `model_list` "
                                "(litellm's Router / proxy config format)")
    return config


def _values_beyond(value: Any, limit: int) -> bool:
    """Whether `value` holds more than `limit` values, counting an aliased one each time it is used;
    stops counting at the limit, so an alias bomb costs no more than a large honest file."""
    stack, seen = [value], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def model_groups(config: dict) -> frozenset[str]:
    """The names a router config answers to: its deployments' `model_name`s and `model_group_alias` keys."""
    names = {str(d.get("model_name")) for d in config["model_list"] if isinstance(d, dict) and d.get("model_name")}
    aliases = (config.get("router_settings") or {}).get("model_group_alias") if isinstance(
        config.get("router_settings"), dict) else None
    return frozenset(names | set(map(str, aliases or {})))


def router_secrets(config: dict) -> tuple[str, ...]:
    """The API keys a router config holds, as written or read from `os.environ/NAME`: never to be shown."""
    keys = []
    for deployment in config["model_list"]:
        params = deployment.get("litellm_params") if isinstance(deployment, dict) else None
        key = params.get("api_key") if isinstance(params, dict) else None
        if isinstance(key, str):
            keys.append(os.environ.get(key.removeprefix("os.environ/"), "") if key.startswith("os.environ/") else key)
    return tuple(key for key in keys if key)


def router_price(path: str, prompt_tokens: int, completion_tokens: int) -> Optional[float]:
    """The most these tokens can cost through a router file: on its dearest deployment, since any
    group may be another's fallback. None when a deployment has no price or the file is unreadable."""
    try:
        deployments = router_config(path)["model_list"]
    except RouterConfigError:
        return None
    costs = []
    for deployment in deployments:
        params = deployment.get("litellm_params") if isinstance(deployment, dict) else None
        model = str(params.get("model")) if isinstance(params, dict) else ""
        costs.append(0.0 if embedded.serves(model) else prices.cost(model, prompt_tokens, completion_tokens))
    return None if None in costs else max(costs)


def _sending_host(fast: FastPath):
    """litellm's own `PythonHost` for a Router (what the Router reaches outside itself), except that
    its chat call goes out on `fast` whenever the fast path would send it."""
    from litellm.router_python_host import PythonHost

    class SendingHost(PythonHost):
        __slots__ = ()

        def invoke(self, op: str):
            endpoint = super().invoke(op)
            if op != "acompletion":
                return endpoint

            async def acompletion(**kwargs: Any):
                request = {key: value for key, value in kwargs.items()
                           if key not in ROUTER_BOOKKEEPING and not (key in ROUTER_SWITCHES and not value)}
                model, messages = request.pop("model"), request.pop("messages")
                api_base, api_key, timeout, extra_headers = (
                    request.pop(key, None) for key in ("api_base", "api_key", "timeout", "extra_headers"))
                route = fast.route(model, api_base, api_key, request)
                if route is None:
                    return await endpoint(**kwargs)
                try:
                    reply = await fast.send(route, messages, timeout or 600.0, extra_headers, request)
                except CallError as exc:
                    raise _as_litellm_error(exc, route.model) from exc
                return _model_response(reply, route.model)
            return acompletion

    return SendingHost()


def _as_litellm_error(exc: CallError, model: str) -> Exception:
    """The litellm exception litellm itself would have raised, so the Router cools down, falls back
    (`context_window_fallbacks` on a too-long prompt, ...) and reports as it always does."""
    litellm = _litellm()
    if exc.status_code is None:  # no reply came back: a timeout, no connection, no key to send
        return getattr(litellm, exc.name)(message=exc.message, llm_provider="openai", model=model)
    from litellm.litellm_core_utils.exception_mapping_utils import exception_type

    try:
        exception_type(model=model, custom_llm_provider="openai", original_exception=exc)
    except Exception as mapped:  # exception_type raises what it maps to
        return mapped
    return exc


def _model_response(reply: Reply, model: str):
    """A `litellm.ModelResponse` for the Router, carrying the `Reply` it was made from."""
    litellm = _litellm()
    response = litellm.ModelResponse(
        model=model,
        choices=[{"index": 0, "finish_reason": reply.finish_reason or "stop",
                  "message": {"role": "assistant", "content": reply.text}}],
        usage={"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
               "total_tokens": reply.prompt_tokens + reply.completion_tokens})
    response._hidden_params.update({"response_cost": reply.cost, REPLY: reply})
    return response


def from_litellm(response: Any, model: str) -> Reply:
    """A `litellm.ModelResponse` as a Reply, priced as litellm priced it."""
    reply = _reply(response.model_dump(), model)
    return reply._replace(cost=(getattr(response, "_hidden_params", None) or {}).get("response_cost"))
