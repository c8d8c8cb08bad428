"""Several deployments: litellm's Router chooses, the fast path sends.

A model block with `router = FILE` names a model group of a litellm Router / proxy config file.
The Router is built from that file with litellm's own `Router.from_config(config, host)`, and its
host sends a chat call on the fast path (transport.py) whenever the chosen deployment is
OpenAI-compatible, through `litellm.acompletion` otherwise. Choosing (least-busy reservations),
per-deployment limits, cooldowns and fallbacks stay the Router's; a failed request is raised as
the exception litellm itself would raise, so they work unchanged. litellm's own call costs about
6 ms of client CPU, the fast path 0.4 (bench/router_throughput.py).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional

from . import embedded, prices
from .diagnostics import one_of
from .faults import CallError, first_line, mask_secrets, redact
from .transport import FastPath, Reply, from_litellm, import_litellm


class Routers:
    """The litellm Routers of a session, one per config file, built on first use."""

    def __init__(self, fast: FastPath, count: Callable[[str], None] = lambda name: None) -> None:
        self.fast, self.count = fast, count  # count: where each routed call went, for the ledger
        self._routers: dict = {}  # config path -> litellm.Router
        self._groups: dict[str, frozenset[str]] = {}  # config path -> its model groups and aliases
        self.secrets: dict[str, tuple[str, ...]] = {}  # config path -> the API keys it holds

    async def acompletion(self, model: str, messages: list, *, router: str, timeout: float = 600.0,
                          api_base: Optional[str] = None, api_key: Optional[str] = None,
                          **params: Any) -> Reply:
        """One call to the model group `model` of the config file `router` (addresses and keys are the file's)."""
        path = router
        built = self._routers.get(path)
        if built is None:
            config = router_config(path)
            self.secrets[path] = router_secrets(config)
            self._groups[path] = model_groups(config)
            built = self._routers[path] = load_router(path, config, self.fast, self.count)
        if model not in self._groups[path]:  # litellm would say "no healthy deployments", once per call
            raise RouterConfigError(f"router config {path}: {one_of(model, 'model group', sorted(self._groups[path]))}")
        response = await built.acompletion(model=model, messages=messages, timeout=timeout, **params)
        return response._hidden_params.get(REPLY) or from_litellm(response, response.model or model)


class RouterConfigError(Exception):
    """A router config file that cannot be read or is not a litellm Router config."""


#: Where a Router's reply carries the `Reply` the fast path made of it (one parse, not two).
REPLY = "sbpc_reply"
#: What litellm's Router adds to each call for its own bookkeeping; the fast path has no use for it.
ROUTER_BOOKKEEPING = frozenset({"metadata", "model_info", "litellm_trace_id", "litellm_call_id",
                                "_context_compaction_state", "max_retries",
                                "fallback_depth", "max_fallbacks", "attempted_targets",  # on a fallback hop
                                # a deployment's own limits and weight, which the Router keeps itself
                                "rpm", "tpm", "weight", "max_parallel_requests", "order"})
#: A deployment's own prices (per token), which litellm uses instead of its table's.
PRICES = ("input_cost_per_token", "output_cost_per_token")
#: Router switches the fast path can ignore while they are off; on, litellm sends the call.
ROUTER_SWITCHES = frozenset({"allow_client_keepalive_override", "use_in_pass_through", "use_litellm_proxy",
                             "use_xai_oauth", "merge_reasoning_content_in_choices", "caching", "client", "stream"})


def load_router(path: str, config: dict, fast: FastPath, count: Callable[[str], None]):
    """A `litellm.Router` from a litellm proxy/Router config file (YAML or JSON):
    `model_list` (deployments: `model_name`, `litellm_params` with `model`,
    `api_base`, `api_key` or `os.environ/VAR`, `rpm`, `tpm`, `weight`) and
    `router_settings` (`routing_strategy`, `fallbacks`, `num_retries`, ...).

    The Router chooses, limits, cools down and falls back as it always does; only the request to an
    OpenAI-compatible deployment is sent by `fast` (litellm's own call costs 6 ms of CPU, ours 0.4)."""
    settings = config.get("router_settings") or {}
    if not isinstance(settings, dict):
        raise RouterConfigError(f"router config {path}: `router_settings` must be a mapping")
    import_litellm()
    deployments = [d.get("litellm_params") for d in config["model_list"] if isinstance(d, dict)]
    if any(isinstance(params, dict) and embedded.serves(str(params.get("model"))) for params in deployments):
        embedded.register()  # the Router checks every deployment's provider as it is built
    from litellm.router import Router, router_arguments
    from litellm.router_config import build_router_config

    try:
        arguments = router_arguments(model_list=config["model_list"], **{"num_retries": 0, **settings})
        router = Router.from_config(build_router_config(arguments), _sending_host(fast, count))
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


def _sending_host(fast: FastPath, count: Callable[[str], None]):
    """litellm's own `PythonHost` for a Router (what the Router reaches outside itself), except that
    its chat call goes out on `fast` whenever the fast path would send it. Each call is counted by
    where it went and how it ended (`count`), so the ledger shows how the Router spread the load."""
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
                price = [request.pop(key, None) for key in PRICES]
                route = fast.route(model, api_base, api_key, request)
                if not all(isinstance(p, (int, float, type(None))) for p in price):
                    route = None
                where = redact(route.url) if route else f"{model} at {redact(api_base)}" if api_base else model
                try:
                    if route is None:
                        response = await endpoint(**kwargs)
                    else:
                        try:
                            reply = await fast.send(route, messages, timeout or 600.0, extra_headers, request)
                        except CallError as exc:
                            raise _as_litellm_error(exc, route.model) from exc
                        if price != [None, None]:
                            reply = reply._replace(cost=reply.prompt_tokens * (price[0] or 0.0)
                                                   + reply.completion_tokens * (price[1] or 0.0))
                        response = _model_response(reply, route.model)
                except Exception as exc:
                    count(f"routed calls failed at {where} ({type(exc).__name__})")
                    raise
                count(f"routed calls answered by {where}")
                return response
            return acompletion

    return SendingHost()


def _as_litellm_error(exc: CallError, model: str) -> Exception:
    """The litellm exception litellm itself would have raised, so the Router cools down, falls back
    (`context_window_fallbacks` on a too-long prompt, ...) and reports as it always does."""
    litellm = import_litellm()
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
    litellm = import_litellm()
    response = litellm.ModelResponse(
        model=model,
        choices=[{"index": 0, "finish_reason": reply.finish_reason or "stop",
                  "message": {"role": "assistant", "content": reply.text}}],
        usage={"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
               "total_tokens": reply.prompt_tokens + reply.completion_tokens})
    response._hidden_params.update({"response_cost": reply.cost, REPLY: reply})
    return response
