"""The call path to models: litellm for every provider, with a fast lane for OpenAI-compatible ones.

`litellm.acompletion` spends about 4 ms of Python per call (logging objects, an
executor hop, the OpenAI SDK), which at 64 calls in flight saturates a core. For
OpenAI-compatible providers `FastPath` keeps everything of litellm that matters
to us (model strings and provider resolution, its parameter mapping and request
body, its price table, its exception classes) but sends the request over one
shared aiohttp session: about 0.5 ms per call (see docs/performance.md).
Everything else goes to `litellm.acompletion(..., max_retries=0)`; our own layer
retries. Measured in bench/litellm_overhead.py.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import json
import os
from typing import Any, NamedTuple, Optional
from urllib.parse import unquote, urlsplit, urlunsplit

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before litellm is imported: no network

import aiohttp  # noqa: E402  (litellm's own HTTP client library)
import litellm  # noqa: E402
from aiohttp.helpers import get_env_proxy_for_url  # noqa: E402
from litellm.llms.openai.common_utils import OpenAIError  # noqa: E402
from litellm.types.utils import LlmProviders  # noqa: E402
from litellm.utils import ProviderConfigManager  # noqa: E402
from yarl import URL  # noqa: E402

from .faults import BadReply, first_line, redact  # noqa: E402

ENV_BASES = ("OPENAI_BASE_URL", "OPENAI_API_BASE")  # where litellm and the OpenAI SDK look, in this order


class Route(NamedTuple):
    """Where and how a model string is served on the fast path."""
    model: str          # provider-side model name, e.g. "gpt-4o-mini"
    provider: str       # litellm provider, e.g. "openai"
    url: str            # .../chat/completions, without user:password@
    api_base: str
    authorization: str  # "Bearer <key>", or "Basic ..." from a user:password@ in the base URL
    config: Any         # litellm chat config (builds the request body)
    proxy: Any          # env proxy for url (HTTP(S)_PROXY / NO_PROXY) or None
    proxy_auth: Any

    def __repr__(self) -> str:  # keep the API key out of logs
        return (f"Route(model={self.model!r}, provider={self.provider!r}, "
                f"url={self.url!r})")


class FastPath:
    """``litellm.acompletion`` replacement with a cheap path for
    OpenAI-compatible providers.

    Keeps: litellm model strings and provider resolution
    (``litellm.get_llm_provider``), litellm's parameter mapping
    (``get_optional_params``) and request body (the provider config's
    ``transform_request``), litellm's price table (``cost_per_token``) and
    litellm's exception classes (``exception_type``).  Drops: litellm's
    logging/callback machinery (sbpc registers no litellm callbacks),
    litellm's retries (sbpc retries itself) and the executor-thread hop.

    Anything else -- other providers, ``stream=True``, parameters outside
    ``PARAMS`` -- goes to ``litellm.acompletion(..., max_retries=0)``.
    Both paths return a ``litellm.ModelResponse`` whose
    ``_hidden_params["response_cost"]`` is the cost (None if unpriced).

    One instance per process; it keeps one aiohttp session per event loop.
    """

    #: Providers whose litellm chat config is a plain OpenAI passthrough.
    #: Widen only after checking the provider's config in litellm.
    PROVIDERS = frozenset({"openai", "hosted_vllm", "lm_studio", "llamafile"})
    #: Request parameters the fast path forwards (through litellm's mapping).
    PARAMS = frozenset({
        "temperature", "top_p", "max_tokens", "max_completion_tokens", "n",
        "stop", "seed", "presence_penalty", "frequency_penalty", "logit_bias",
        "user", "logprobs", "top_logprobs", "response_format", "tools",
        "tool_choice", "parallel_tool_calls", "reasoning_effort",
    })

    def __init__(self, connection_limit: int = 0) -> None:
        self._connection_limit = connection_limit  # 0 = unlimited
        self._sessions: dict = {}

    # -- public ------------------------------------------------------------
    async def acompletion(self, model: str, messages: list, *,
                          api_base: Optional[str] = None,
                          api_key: Optional[str] = None,
                          timeout: float = 600.0,
                          extra_headers: Optional[dict] = None,
                          **params: Any):

        route = None
        if (not params.get("stream") and self.PARAMS.issuperset(params)
                and not isinstance(params.get("response_format"), type)):
            route = _fast_route(model, api_base, api_key, _env_snapshot())
        if route is None or route.provider not in self.PROVIDERS:
            if api_base:
                api_base, basic = split_credentials(api_base)
                if basic:
                    extra_headers = {**(extra_headers or {}), "Authorization": basic}
            return await litellm.acompletion(
                model=model, messages=messages, api_base=api_base,
                api_key=api_key, timeout=timeout, extra_headers=extra_headers,
                max_retries=0, **params)
        return await self._fast(route, messages, timeout, extra_headers,
                                params)

    @staticmethod
    def endpoint(model: str, api_base: Optional[str]) -> Optional[str]:
        """Where calls for this model go, without credentials; None for
        in-process models and providers whose address litellm keeps."""
        return _endpoint(model, api_base, _env_snapshot())

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

    async def _fast(self, route: Route, messages: list, timeout: float,
                    extra_headers: Optional[dict], params: dict):

        optional = _optional_params(route.model, route.provider, params)
        extra_body = optional.pop("extra_body", None) or {}
        body = route.config.transform_request(
            route.model, messages, optional,
            {"custom_llm_provider": route.provider,
             "api_base": route.api_base}, {})
        body.update(extra_body)
        headers = {"Authorization": route.authorization}
        if extra_headers:
            headers.update(extra_headers)

        try:
            async with self._session().post(
                    route.url, json=body, headers=headers,
                    proxy=route.proxy, proxy_auth=route.proxy_auth,
                    timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                payload = await resp.read()
                status, resp_headers = resp.status, dict(resp.headers)
                reason = resp.reason
        except asyncio.TimeoutError as exc:
            raise litellm.Timeout(
                message=f"Request timed out after {timeout} s",
                model=route.model, llm_provider=route.provider) from exc
        except aiohttp.ClientError as exc:
            raise litellm.APIConnectionError(
                message=str(exc), llm_provider=route.provider,
                model=route.model) from exc
        if status >= 400:
            error = OpenAIError(status_code=status,
                                message=_error_message(payload, status, reason),
                                headers=resp_headers)
            # The mapping acompletion applies (RateLimitError, ...).
            raise litellm.exception_type(
                model=route.model, original_exception=error,
                custom_llm_provider=route.provider)

        response = _completion(payload)
        try:
            prompt_cost, completion_cost = litellm.cost_per_token(
                model=route.model, custom_llm_provider=route.provider,
                usage_object=response.usage)
            cost = prompt_cost + completion_cost
        except Exception:  # model not in the price table
            cost = None
        response._hidden_params.update({
            "custom_llm_provider": route.provider, "api_base": route.api_base,
            "response_cost": cost, "headers": resp_headers,
            "sbpc_fast_path": True,
        })
        return response


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


def _resolve(model: str, api_base: Optional[str]):
    """(provider-side name, provider, key litellm found, base URL) or None."""
    try:
        name, provider, dynamic_key, base = litellm.get_llm_provider(
            model, api_base=api_base)
    except Exception:
        return None
    if provider == "openai":
        env = os.environ.get
        base = base or litellm.api_base or env(ENV_BASES[0]) or env(
            ENV_BASES[1]) or "https://api.openai.com/v1"
    return name, provider, dynamic_key, base


@functools.lru_cache(maxsize=1024)
def _endpoint(model: str, api_base: Optional[str], env: tuple) -> Optional[str]:
    resolved = _resolve(model, api_base)
    if resolved is None:
        return redact(api_base)
    _, provider, _, base = resolved
    if not base:
        return None
    if provider in FastPath.PROVIDERS:
        base = base.rstrip("/") + "/chat/completions"
    return redact(base)


@functools.lru_cache(maxsize=1024)
def _fast_route(model: str, api_base: Optional[str],
                api_key: Optional[str], env: tuple) -> Optional[Route]:
    """Resolve a litellm model string once per environment."""

    resolved = _resolve(model, api_base)
    if resolved is None:
        return None
    name, provider, dynamic_key, base = resolved
    if provider == "openai":
        api_key = (api_key or dynamic_key or litellm.api_key
                   or litellm.openai_key or os.environ.get("OPENAI_API_KEY"))
    else:
        api_key = api_key or dynamic_key
    if not base:
        return None
    base, basic = split_credentials(base)
    if not (basic or api_key):
        return None
    config = ProviderConfigManager.get_provider_chat_config(
        name, LlmProviders(provider))
    if config is None:
        return None
    url = base.rstrip("/") + "/chat/completions"
    try:
        proxy, proxy_auth = get_env_proxy_for_url(URL(url))
    except LookupError:
        proxy = proxy_auth = None
    return Route(name, provider, url, base, basic or f"Bearer {api_key}",
                 config, proxy, proxy_auth)


def _optional_params(model: str, provider: str, params: dict) -> dict:
    """litellm's provider parameter mapping (a fresh dict per call).

    ``get_optional_params`` costs ~0.1 ms, so results for hashable parameter
    sets (the common case: scalars only) are memoised.
    """
    try:
        key = tuple(sorted(params.items()))
        return dict(_optional_params_cached(
            model, provider, litellm.drop_params, key))
    except TypeError:  # unhashable values (stop lists, tools, ...)
        return _map_params(model, provider, params)


@functools.lru_cache(maxsize=4096)
def _optional_params_cached(model: str, provider: str, drop_params: Any,
                            items: tuple) -> dict:
    return _map_params(model, provider, dict(items))


def _map_params(model: str, provider: str, params: dict) -> dict:
    optional = litellm.utils.get_optional_params(
        model=model, custom_llm_provider=provider, **params)
    optional.pop("stream", None)
    return optional


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


def _completion(payload: bytes):
    """A 2xx body as a ModelResponse; BadReply when it is not a chat
    completion with text (never let such a reply be cached as "")."""
    try:
        body = json.loads(payload)
    except ValueError:
        raise BadReply(f"the body is not JSON ({first_line(payload.decode('utf-8', 'replace')[:200])})") from None
    if not isinstance(body, dict):
        raise BadReply(f"the body is a JSON {type(body).__name__}, not an object")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise BadReply("no choices in the reply" if choices is None else "empty choices in the reply")
    try:
        return litellm.ModelResponse(**body)
    except Exception as exc:
        raise BadReply(f"not a chat completion ({type(exc).__name__})") from None
