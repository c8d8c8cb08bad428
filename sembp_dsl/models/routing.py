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

import asyncio
import datetime
import hashlib
import json
import math
import os
import random
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..errors import SbpcError
from ..language.diagnostics import one_of, url_problem
from ..language.messages import Capabilities, Message
from . import wire
from .faults import BadReply, CallError, first_line, mask_secrets, redact, retry_after
from .transport import FastPath, Reply, Transport, from_litellm, import_litellm, serving


class Routers(Transport):
    """The transport of every model block with `router = FILE` (as httpx's mounts are a transport): the litellm
    Routers of a session, one per config file, built on first use, each sending on the shared fast path."""

    pooled = True

    def __init__(self, fast: FastPath, count: Callable[[str], None] = lambda name: None) -> None:
        self.fast, self.count = fast, count  # count: where each routed call went, for the ledger
        self._routers: dict = {}  # config path -> litellm.Router
        self._configs: dict[str, dict] = {}  # config path -> the file as read
        self._groups: dict[str, frozenset[str]] = {}  # config path -> its model groups and aliases
        self._fingerprints: dict[str, str] = {}  # config path -> what it routes to, for the cache key
        self.secrets: dict[str, tuple[str, ...]] = {}  # config path -> the API keys it holds

    def config(self, path: str) -> dict:
        """The config file at `path`, read once a session: its Router is built from what was read."""
        config = self._configs.get(path)
        if config is None:
            config = router_config(path)
            self.secrets[path] = router_secrets(config)
            self._groups[path] = model_groups(config)
            self._configs[path] = config
        return config

    def fingerprint(self, path: str) -> str | None:
        """What answers a call through this file, for the cache key: its deployments and aliases, less keys,
        limits and prices (a file that points a group at another model or server is not answered from the
        cache). None when the file cannot be read: the call says why. Computed once a session (every call
        asks)."""
        if path not in self._fingerprints:
            try:
                self._fingerprints[path] = _fingerprint(self.config(path))
            except RouterConfigError:
                return None
        return self._fingerprints[path]

    def capabilities(self, model: str) -> Capabilities:
        """A model group is held to no constraint and offered no tools natively: its deployments may differ."""
        return Capabilities()

    def retries_itself(self, settings: Mapping[str, Any]) -> bool:
        """Whether the call's router file sets the Router's own retries: then they are the call's whole retry
        chain, all within the call's timeout (sbpc's retries on top multiplied them and their waits: `--timeout
        5` took 90 s to fail)."""
        try:
            settings = self.config(str(settings["router"])).get("router_settings") or {}
        except RouterConfigError:
            return False
        return bool(settings.get("num_retries") or settings.get("retry_policy"))

    def dearest(self, path: str, prompt_tokens: int, completion_tokens: int) -> float | None:
        """The most these tokens can cost through a router file: on its dearest deployment, since any
        group may be another's fallback. None when a deployment has no price or the file is unreadable."""
        try:
            deployments = self.config(path)["model_list"]
        except RouterConfigError:
            return None
        costs = []
        for deployment in deployments:
            params = deployment["litellm_params"]
            if any(key in params for key in PRICES):  # its own prices, as litellm would charge them
                costs.append(
                    prompt_tokens * (params.get(PRICES[0]) or 0.0) + completion_tokens * (params.get(PRICES[1]) or 0.0)
                )
            else:
                model = params["model"]
                costs.append(serving(model)().price(model, prompt_tokens, completion_tokens))
        return None if None in costs else max(costs)

    async def send(self, model: str, messages: Sequence[Message], *, timeout: float = 600.0, **params: Any) -> Reply:
        """One call to the model group `model` of the config file its `router` setting names (addresses and keys
        are the file's: a model block's api_base and api_key are not sent)."""
        path = str(params.pop("router"))
        for own in ("api_base", "api_key"):
            params.pop(own, None)
        built = self._routers.get(path)
        if built is None:
            unset = unset_variable(self.config(path))
            if unset:  # litellm would send without a key and blame OPENAI_API_KEY, once per deployment and retry
                raise RouterConfigError(f"router config {path}: {unset}")
            built = self._routers[path] = load_router(path, self.config(path), self.fast, self.count)
        if model not in self._groups[path]:  # litellm would say "no healthy deployments", once per call
            raise RouterConfigError(f"router config {path}: {one_of(model, 'model group', sorted(self._groups[path]))}")
        waited, pause = 0.0, FIRST_PAUSE
        while True:
            call = _Routed(timeout)  # not passed to the Router: a deployment's own `timeout` would lose to it
            token = ROUTED.set(call)
            try:  # the Router's own retries and waits (num_retries, retry_after) end with the call's time
                response = await asyncio.wait_for(
                    built.acompletion(model=model, messages=wire.encode(messages), **params), timeout - waited
                )
                break
            except asyncio.TimeoutError:
                if not call.sent:  # the Router held it back all along: say why, as its own refusal would
                    raise _refusal(Exception(), model) from None
                raise CallError(f"Request timed out after {timeout} s", name="Timeout") from None
            except Exception as exc:
                failure = _as_call_error(exc, model)  # the Router's exception stays its __context__
                if call.sent or getattr(failure, "status_code", None) != 429:
                    raise failure  # a request went out and failed: the retry layer's to judge
                # the Router sent nothing: every deployment is at its limits or cooling down. Wait for one,
                # up to the call's timeout: a queue, not a failed attempt
                if not isinstance(failure, CallError):
                    failure = _refusal(failure, model)
                if waited + pause > timeout:
                    raise failure
            finally:
                ROUTED.reset(token)
            if not waited:
                self.count("routed calls that waited for a free deployment")
            pause = min(2 * pause, retry_after(failure.headers) or MAX_PAUSE, MAX_PAUSE) * random.uniform(0.5, 1.0)
            await asyncio.sleep(pause)
            waited += pause
        return response._hidden_params.get(REPLY) or from_litellm(response, response.model or model)


def _fingerprint(config: dict) -> str:
    deployments = sorted(
        json.dumps(
            {
                "model_name": d["model_name"],
                **{
                    key: redact(value) if key == "api_base" and isinstance(value, str) else value
                    for key, value in d["litellm_params"].items()
                    if key not in NOT_ANSWERS
                },
            },
            sort_keys=True,
            default=str,
        )
        for d in config["model_list"]
    )
    aliases = json.dumps((config.get("router_settings") or {}).get("model_group_alias"), sort_keys=True, default=str)
    return hashlib.sha256(json.dumps([deployments, aliases]).encode()).hexdigest()


class RouterConfigError(SbpcError):
    """A router config file that cannot be read or is not a litellm Router config."""


@dataclass
class _Routed:
    """A routed call in progress: how long sbpc waits for it (the model block's `timeout`; the Router's
    own for the deployment it chose, a deployment's `timeout` then router_settings', applies when
    shorter), and how many requests the Router sent for it (none: it refused the call itself)."""

    deadline: float
    sent: int = 0


ROUTED: ContextVar[_Routed] = ContextVar("sbpc_routed_call")
#: Seconds between asking a Router that has no deployment free: doubling from the first, up to the most
#: (the Router's own hint of how long, a cooldown's or a minute's rpm window, is often far too long).
FIRST_PAUSE, MAX_PAUSE = 0.05, 1.0
#: Where a Router's reply carries the `Reply` the fast path made of it (one parse, not two).
REPLY = "sbpc_reply"
#: What litellm's Router adds to each call for its own bookkeeping; the fast path has no use for it.
ROUTER_BOOKKEEPING = frozenset(
    {
        "metadata",
        "model_info",
        "litellm_trace_id",
        "litellm_call_id",
        "_context_compaction_state",
        "max_retries",
        "fallback_depth",
        "max_fallbacks",
        "attempted_targets",  # on a fallback hop
        # a deployment's own limits and weight, which the Router keeps itself
        "rpm",
        "tpm",
        "weight",
        "max_parallel_requests",
        "order",
    }
)
#: A deployment's own prices (per token), which litellm uses instead of its table's.
PRICES = ("input_cost_per_token", "output_cost_per_token")
#: A deployment's settings that decide how or when it is asked, not what it answers.
NOT_ANSWERS = frozenset(
    {"api_key", "rpm", "tpm", "weight", "max_parallel_requests", "order", "timeout", "stream_timeout", *PRICES}
)
#: Router switches the fast path can ignore while they are off; on, litellm sends the call.
ROUTER_SWITCHES = frozenset(
    {
        "allow_client_keepalive_override",
        "use_in_pass_through",
        "use_litellm_proxy",
        "use_xai_oauth",
        "merge_reasoning_content_in_choices",
        "caching",
        "client",
        "stream",
    }
)


def load_router(path: str, config: dict, fast: FastPath, count: Callable[[str], None]):
    """A `litellm.Router` from a litellm proxy/Router config file (YAML or JSON):
    `model_list` (deployments: `model_name`, `litellm_params` with `model`,
    `api_base`, `api_key` or `os.environ/VAR`, `rpm`, `tpm`, `weight`) and
    `router_settings` (`routing_strategy`, `fallbacks`, `num_retries`, ...).

    The Router chooses, limits, cools down and falls back as it always does; only the request to an
    OpenAI-compatible deployment is sent by `fast` (litellm's own call costs 6 ms of CPU, ours 0.4)."""
    settings = config.get("router_settings") or {}
    import_litellm()
    for kind in {serving(d["litellm_params"]["model"]) for d in config["model_list"]}:
        kind().register_with_litellm()  # the Router checks every deployment's provider as it is built
    from litellm.router import Router, router_arguments  # litellm's (seconds to import): only with a router file
    from litellm.router_config import build_router_config  # litellm's, as above

    try:
        arguments = router_arguments(model_list=config["model_list"], **{"num_retries": 0, **settings})
        router = Router.from_config(build_router_config(arguments), _sending_host(fast, count))
    except Exception as exc:  # litellm validates deployments and settings its own way
        raise RouterConfigError(f"router config {path}: {_complaint(exc, router_secrets(config))}") from None
    return router


def _complaint(exc: Exception, secrets: tuple[str, ...]) -> str:
    """litellm's objection to a config in one line, never quoting a value (it may be a key): a pydantic
    error by field and reason ("rpm: Input should be a valid integer"), any other by its first line."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            first = errors(include_url=False, include_input=False)[0]
            return f"litellm_params: {'.'.join(map(str, first['loc']))}: {first['msg']}"
        except (TypeError, LookupError):  # an `errors` that is not pydantic's: its first line says enough
            pass
    return f"{type(exc).__name__}: {first_line(mask_secrets(str(exc), secrets))}"


#: A router file past these sizes is refused: a few YAML aliases can stand for billions of values,
#: which litellm's Router would copy out in full.
MAX_ROUTER_BYTES = 4 * 2**20
MAX_ROUTER_VALUES = 100_000


def router_config(path: str) -> dict:
    """A router config file read as data (litellm is not needed for it); RouterConfigError when it
    cannot be read, is not a regular file (a FIFO would block), is too large, or has no deployments."""
    import yaml  # PyYAML: about 20 ms of startup, which only a router file needs

    if os.path.exists(path) and not os.path.isfile(path):
        raise RouterConfigError(f"router config {path}: not a regular file (a folder, FIFO or device?)")
    try:
        if os.path.getsize(path) > MAX_ROUTER_BYTES:
            raise RouterConfigError(f"router config {path}: larger than {MAX_ROUTER_BYTES // 2**20} MB")
        with open(path, encoding="utf-8") as file:
            config = yaml.safe_load(file)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise RouterConfigError(f"router config {path}: {exc}") from None
    except RecursionError:
        raise RouterConfigError(f"router config {path}: nested too deeply to be a router config") from None
    except (ValueError, TypeError) as exc:  # a value its tag cannot hold: `!!int abc`, `!!timestamp 2020-13-45`
        raise RouterConfigError(f"router config {path}: a value YAML cannot read ({exc})") from None
    except (KeyError, AttributeError, IndexError):  # PyYAML's own, on `!!bool maybe`, `!!timestamp never`
        raise RouterConfigError(f"router config {path}: a value YAML cannot read ({_tagged(path)})") from None
    problem = _data_problem(config, MAX_ROUTER_VALUES)
    if problem:
        raise RouterConfigError(f"router config {path}: {problem}")
    if not isinstance(config, dict) or not isinstance(config.get("model_list"), list) or not config["model_list"]:
        raise RouterConfigError(
            f"router config {path}: expected a mapping with a non-empty `model_list` "
            "(litellm's Router / proxy config format)"
        )
    problem = _shape_problem(config)
    if problem:
        raise RouterConfigError(f"router config {path}: {problem}")
    return config


def _tagged(path: str) -> str:
    """Which tagged value PyYAML failed on without saying so (a KeyError for `!!bool maybe`): the first whose
    tag cannot hold it, found by reading the file again tag by tag."""
    import yaml  # as router_config: only a router file needs it

    try:
        with open(path, encoding="utf-8") as file:
            events = list(yaml.parse(file))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):  # changed since it was read
        return "a tagged value"
    for event in events:
        tag = getattr(event, "tag", None)
        if isinstance(event, yaml.ScalarEvent) and tag and tag.startswith("tag:yaml.org,2002:"):
            node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark)
            try:
                yaml.SafeLoader("").construct_object(node)
            except Exception:  # noqa: BLE001 (PyYAML's own KeyError, AttributeError...: this value is the one)
                return f"!!{tag.rsplit(':', 1)[-1]} {event.value!r:.40}, line {event.start_mark.line + 1}"
    return "a tagged value"


#: Deployment settings the Router does arithmetic with (litellm checks only some of them itself).
DEPLOYMENT_NUMBERS = ("rpm", "tpm", "weight", "max_parallel_requests", "timeout", "stream_timeout", *PRICES)
#: ... and those of them at 0 would make a deployment that never takes a call.
DEPLOYMENT_LIMITS = ("rpm", "tpm", "max_parallel_requests", "timeout", "stream_timeout")
#: Router settings that are counts or seconds (litellm takes any value for these and fails, or
#: silently does something else, on the first call).
SETTING_NUMBERS = (
    "num_retries",
    "timeout",
    "stream_timeout",
    "cooldown_time",
    "allowed_fails",
    "retry_after",
    "max_fallbacks",
)
FALLBACK_SETTINGS = ("fallbacks", "context_window_fallbacks", "content_policy_fallbacks")


def _shape_problem(config: dict) -> str | None:
    """What makes a config litellm's Router would take and then fail on (a traceback on the first call,
    or a fallback that never happens), in the words of the file; None when it has the right shape."""
    for index, deployment in enumerate(config["model_list"]):
        problem = _deployment_problem(index + 1, deployment)
        if problem:
            return problem
    settings = config.get("router_settings") or {}
    if not isinstance(settings, dict):
        return "`router_settings` must be a mapping"
    groups = {d["model_name"] for d in config["model_list"]}
    aliases = settings.get("model_group_alias") or {}
    problem = _settings_numbers_problem(settings) or _alias_problem(aliases, groups)
    if problem:
        return problem
    return _fallback_problem(settings, groups | set(map(str, aliases)))


def _deployment_problem(number: int, deployment: Any) -> str | None:
    """What is wrong with the `number`th entry of `model_list`; None: nothing."""
    where = f"model_list entry {number}"
    if not isinstance(deployment, dict):
        return f"{where} must be a mapping with `model_name` and `litellm_params`, not {deployment!r:.60}"
    name, params = deployment.get("model_name"), deployment.get("litellm_params")
    if not isinstance(name, str) or not name:
        return f"{where}: `model_name` (the model group it serves) must be a non-empty string"
    where = f"deployment {number} of model group '{name}'"
    if not isinstance(params, dict) or not isinstance(params.get("model"), str) or not params["model"]:
        return f"{where}: `litellm_params` must be a mapping with a `model` string (e.g. openai/gpt-4o-mini)"
    for key in ("api_base", "api_key"):
        if key in params and not isinstance(params[key], (str, type(None))):
            return f"{where}: `{key}` must be a string"  # never quoted: it may be a key
    base = params.get("api_base")
    if isinstance(base, str) and not base.startswith("os.environ/") and url_problem(base):
        return f"{where}: `api_base` {url_problem(base)}"
    for key in DEPLOYMENT_NUMBERS:
        if key in params and not _is_number(params[key]):
            return f"{where}: `{key}` must be a number of at least 0, not {params[key]!r:.40}"
        if key in DEPLOYMENT_LIMITS and params.get(key) == 0:
            return f"{where}: `{key}` must be more than 0"
    return None


def _settings_numbers_problem(settings: dict) -> str | None:
    for key in SETTING_NUMBERS:
        if key in settings and not _is_number(settings[key]):
            return f"router_settings: `{key}` must be a number of at least 0, not {settings[key]!r:.40}"
    return None


def _alias_problem(aliases: Any, groups: set[str]) -> str | None:
    """What is wrong with `model_group_alias`: each alias names a model group, plainly or as {model, hidden}."""
    if not isinstance(aliases, dict):
        return "router_settings: `model_group_alias` must map a name to a model group"
    for alias, target in aliases.items():
        group = target.get("model") if isinstance(target, dict) and isinstance(target.get("hidden"), bool) else target
        if not isinstance(group, str) or group not in groups:
            return f"router_settings: model_group_alias '{alias}': " + (
                one_of(group, "model group", sorted(groups))
                if isinstance(group, str)
                else "must name a model group, or be {model: GROUP, hidden: BOOL}"
            )
    return None


def _fallback_problem(settings: dict, known: set[str]) -> str | None:
    """What is wrong with the fallback settings: each names the `known` groups and aliases only ("*": any)."""
    for key in FALLBACK_SETTINGS:
        fallbacks = settings.get(key)
        if fallbacks is None:
            continue
        if not isinstance(fallbacks, list) or not all(isinstance(f, dict) for f in fallbacks):
            return f"router_settings: `{key}` must be a list of mappings, each `GROUP: [GROUP, ...]`"
        for rule in fallbacks:
            for source, targets in rule.items():
                if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
                    return f"router_settings: {key} of '{source}' must be a list of model groups"
                for name in ([] if source == "*" else [str(source)]) + targets:  # "*": any group
                    if name not in known:
                        return f"router_settings: {key}: " + one_of(name, "model group", sorted(known))
    default = settings.get("default_fallbacks")
    if default is not None and not (isinstance(default, list) and all(t in known for t in default)):
        return "router_settings: `default_fallbacks` must be a list of this file's model groups"
    return None


def router_problem(path: str, groups: tuple[str, ...] = ()) -> str | None:
    """What makes the router config at `path` unusable for calls to its model `groups`, in one line; None
    when a Router can be built from it and answers them (as far as can be told without litellm, which
    `sbpc check` never imports)."""
    try:
        config = router_config(path)
    except RouterConfigError as exc:
        return str(exc)
    known = model_groups(config)
    for group in groups:
        if group not in known:  # what a run would say before its first call
            return f"router config {path}: {one_of(group, 'model group', sorted(known))}"
    return None


def _is_number(value: Any) -> bool:
    """A count or an amount: not a string, not a bool, not negative, not NaN, not infinite (litellm refuses
    `rpm: .inf` when it builds the Router)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < math.inf


def _data_problem(config: Any, limit: int) -> str | None:
    """What makes a router file's YAML more than plain data, in its own words: more than `limit` values
    (counting an aliased one each time it is used, and stopping at the limit, so an alias bomb costs no more
    than a large honest file), a list or mapping that contains itself (`&a [*a]`), a key that is not a string,
    or a value JSON cannot hold (`!!timestamp`, `!!binary`, `!!omap`), which litellm would fail on at the first
    call; None: plain data. Where a value is, is kept as a link to its parent's place and spelt only for the
    error: a spelt path per value cost memory with the square of the nesting."""
    stack: list[tuple[Any, Place]] = [(config, None)]
    inside: list[int] = []  # the ids of the lists and mappings holding the value walked now, outermost first
    seen = 0
    while stack:
        item, where = stack.pop()
        if item is _LEFT:
            inside.pop()
            continue
        seen += 1
        if seen > limit:
            return f"more than {limit:,} values once its YAML aliases are expanded"
        problem = _value_problem(item, inside)
        if problem:
            return f"{_spelt(where) or 'the top level'}: {problem}"
        if isinstance(item, (dict, list)):
            inside.append(id(item))
            stack.append((_LEFT, None))
            pairs = list(item.items() if isinstance(item, dict) else enumerate(item))
            stack.extend((value, (where, key)) for key, value in reversed(pairs))  # the first on top
    return None


#: Where a value is in a router file: None at the top, else (its parent's place, its key or index).
Place = tuple[Any, str | int] | None
_LEFT = object()  # on the walk's stack: the innermost container walked now is done


def _value_problem(item: Any, inside: list[int]) -> str | None:
    """What makes one value more than plain data (its own keys included), not looking inside it."""
    if isinstance(item, (dict, list)):
        if id(item) in inside:
            return "a YAML alias that contains itself"
        key = next((k for k in item if not isinstance(k, str)), None) if isinstance(item, dict) else None
        return None if key is None else f"the key {str(key):.40} is not a string (quote it)"
    if not isinstance(item, PLAIN):
        return f"{_kind_of(item)}, where a router file holds text, numbers, true/false, lists and mappings"
    return None


def _spelt(where: Place) -> str:
    """`model_list[0].litellm_params.seed`: a place as the file's reader finds it."""
    parts: list[str] = []
    while where is not None:
        where, key = where
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return "".join(reversed(parts)).lstrip(".")


#: What a router file's values may be: what JSON holds, as litellm sends it.
PLAIN = (str, int, float, bool, type(None))


def _kind_of(value: Any) -> str:
    """What a YAML tag made of a value, in words that say how to write it instead."""
    if isinstance(value, (datetime.date, datetime.datetime)):
        return "a date (a !!timestamp tag or an unquoted date: quote it to keep it as text)"
    if isinstance(value, bytes):
        return "bytes (a !!binary tag)"
    return f"a {type(value).__name__} (a YAML tag such as !!omap or !!python)"


def unset_variable(config: dict) -> str | None:
    """The first `os.environ/NAME` of a deployment whose variable is not set, in words; None when all are."""
    for index, deployment in enumerate(config["model_list"]):
        for key in ("api_key", "api_base"):
            value = deployment["litellm_params"].get(key)
            if isinstance(value, str) and value.startswith("os.environ/"):
                name = value.removeprefix("os.environ/")
                if not os.environ.get(name):
                    return (
                        f"deployment {index + 1} of model group '{deployment['model_name']}' reads its {key} from "
                        f"${name}, which is not set (export {name}=<your {'key' if key == 'api_key' else 'URL'}>"
                        + ("; a local server accepts any value)" if key == "api_key" else ")")
                    )
    return None


def model_groups(config: dict) -> frozenset[str]:
    """The names a router config answers to: its deployments' `model_name`s and `model_group_alias` keys."""
    names = {d["model_name"] for d in config["model_list"]}
    aliases = (config.get("router_settings") or {}).get("model_group_alias") or {}
    return frozenset(names | set(map(str, aliases)))


def router_secrets(config: dict) -> tuple[str, ...]:
    """The API keys a router config holds, as written or read from `os.environ/NAME`: never to be shown."""
    keys = []
    for deployment in config["model_list"]:
        key = deployment["litellm_params"].get("api_key")
        if key:
            keys.append(os.environ.get(key.removeprefix("os.environ/"), "") if key.startswith("os.environ/") else key)
    return tuple(key for key in keys if key)


def _sending_host(fast: FastPath, count: Callable[[str], None]):
    """litellm's own `PythonHost` for a Router (what the Router reaches outside itself), except that
    its chat call goes out on `fast` whenever the fast path would send it. Each call is counted by
    where it went and how it ended (`count`), so the ledger shows how the Router spread the load."""
    from litellm.router_python_host import PythonHost  # litellm's (seconds to import): only with a router file

    class SendingHost(PythonHost):
        __slots__ = ()

        def invoke(self, op: str):
            if op != "acompletion":
                return super().invoke(op)
            endpoint = super().invoke("acompletion")

            async def acompletion(**kwargs: Any):
                request = {
                    key: value
                    for key, value in kwargs.items()
                    if key not in ROUTER_BOOKKEEPING and not (key in ROUTER_SWITCHES and not value)
                }
                model, messages = request.pop("model"), request.pop("messages")
                api_base, api_key, timeout, extra_headers = (
                    request.pop(key, None) for key in ("api_base", "api_key", "timeout", "extra_headers")
                )
                call = ROUTED.get(_Routed(600.0))  # 600: outside Routers.acompletion
                call.sent += 1
                timeout = kwargs["timeout"] = min(timeout or call.deadline, call.deadline)
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
                            reply = await fast.post(route, messages, timeout, extra_headers, request)
                        except (CallError, BadReply) as exc:
                            raise _as_litellm_error(exc, route.model) from exc
                        if price != [None, None]:
                            reply = reply._replace(
                                cost=reply.prompt_tokens * (price[0] or 0.0)
                                + reply.completion_tokens * (price[1] or 0.0)
                            )
                        response = _model_response(reply, route.model)
                except Exception as exc:
                    count(f"routed calls failed at {where} ({type(exc).__name__})")
                    raise
                count(f"routed calls answered by {where}")
                return response

            return acompletion

    return SendingHost()


def _as_call_error(exc: Exception, group: str) -> Exception:
    """What the Router raised, as the retry layer (retry.py, faults.py) judges failures: a malformed reply
    as the BadReply it was; the Router's own refusal when every deployment is cooling down (a ValueError,
    not an API error) as a 429 to wait out for the cooldown."""
    if isinstance(exc.__cause__, BadReply):
        return exc.__cause__
    from litellm.types.router import RouterRateLimitError, RouterRateLimitErrorBasic  # litellm's: see load_router

    return _refusal(exc, group) if isinstance(exc, (RouterRateLimitError, RouterRateLimitErrorBasic)) else exc


def _refusal(exc: Exception, group: str) -> CallError:
    """The Router's refusal of a call it sent nowhere, as a 429 to wait out for as long as it says, in
    words without its deployments' hash ids."""
    wait = getattr(exc, "cooldown_time", None)
    headers = (
        {"retry-after": str(wait)}
        if isinstance(wait, (int, float))
        else dict(getattr(getattr(exc, "response", None), "headers", None) or {})
    )
    return CallError(
        f"no deployment of model group '{group}' can take a call now (each is cooling down after "
        "failures, or at its rpm, tpm or max_parallel_requests)",
        429,
        headers,
    )


def _as_litellm_error(exc: CallError | BadReply, model: str) -> Exception:
    """The litellm exception litellm itself would have raised, so the Router cools down, falls back
    (`context_window_fallbacks` on a too-long prompt, ...) and reports as it always does. A malformed
    reply is a server error to it (a 200 is one litellm would never retry, and cools down at once)."""
    litellm = import_litellm()
    if isinstance(exc, BadReply):  # litellm's own client fails on such a body as on a server error
        return litellm.InternalServerError(message=str(exc), llm_provider="openai", model=model)
    if exc.status_code is None:  # no reply came back: a timeout, no connection, no key to send
        return getattr(litellm, exc.name)(message=exc.message, llm_provider="openai", model=model)
    from litellm.litellm_core_utils.exception_mapping_utils import exception_type  # litellm's: see load_router

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
        choices=[wire.choice(reply)],
        usage={
            "prompt_tokens": reply.prompt_tokens,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    )
    response._hidden_params.update({"response_cost": reply.cost, REPLY: reply})
    return response
