"""One chat completion, as it is sent and as it is answered.

`prepare` turns a role's model and a prompt into a `Request`: the settings that are sent, those that are
sbpc's own (how long to wait, how many calls at once, rate limits), where the call goes, and its cache
key; `Request.secrets` names what its errors must never show. The cache key holds what decides the answer (the model, the
messages, the sampling settings, the endpoint, what a router file routes to), never a key or the
credentials in a URL.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..language.graph.graph import ModelSpec
from ..language.messages import Ask, Message, Turn
from . import constraints, wire
from .cache import cache_key
from .faults import LLMError
from .prices import DECLARED
from .reply import Reply
from .routing import Routers
from .transport import Transport

LIMITS = ("concurrency", "rpm", "tpm")  # a model block's bounds on sending: kept here, never sent
LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # half a pair: JSON can say it, no request can carry it


@dataclass(frozen=True)
class ResolvedModel(ModelSpec):
    """A role's or a named model once chosen (the pipeline's, a flag's or the embedded one): its name is known."""

    name: str


@dataclass(frozen=True)
class Request:
    model: str
    messages: tuple[Message, ...]
    settings: dict = field(repr=False)  # what is sent: sampling settings, api_base, api_key, router
    timeout: float
    limits: Mapping[str, int]
    endpoint: str | None  # where the call goes, without credentials; None: the provider's default
    key: str  # the cache key
    constraint: str | None = None  # "grammar" or "schema": the reply's shape is sent with it (constraints.py)

    def secrets(self, routers: Routers) -> tuple[str, ...]:
        """What a failure's message must never show: the call's own key, the usual one, a router file's keys."""
        found = (
            self.settings.get("api_key"),
            os.environ.get("OPENAI_API_KEY"),
            *routers.secrets.get(self.settings.get("router", ""), ()),
        )
        return tuple(s for s in found if s)


def prepare(spec: ResolvedModel, ask: Ask, timeout: float, transport: Transport, routers: Routers) -> Request:
    """The request `ask` makes of the model `spec`, sent by `transport`: its messages, held to the reply's shape
    where the model takes it; a turn of a tool loop: its tools offered natively, or each reply held to the JSON
    schema of the text form, where the model takes a schema (or a grammar: the embedded transport makes one)."""
    settings: dict[str, Any] = dict(spec.settings)  # each key's type is the checker's to hold
    kind = constraints.form(spec.name, settings, transport)
    settings.pop("constrain", None)  # sbpc's to apply, never sent
    for price in DECLARED:  # sbpc's to charge, never sent
        settings.pop(price, None)
    sent = constraints.request(ask.shape, kind, constraints.max_tokens(settings))
    if ask.tools:
        sent = {**sent, "tools": [dict(tool) for tool in ask.tools]}
    if ask.schema is not None:
        sent = {**sent, **constraints.schema_request(dict(ask.schema), kind, constraints.max_tokens(settings))}
    settings.update(sent)  # a grammar, a response_format or tools: part of the cache key, as they decide the answer
    timeout = float(settings.pop("timeout", timeout))  # how long to wait is not part of the answer
    own_key = api_key(spec, settings.pop("api_key_env", None))
    if own_key:
        settings["api_key"] = own_key
    limits = {name: settings.pop(name) for name in LIMITS if name in settings}
    router = settings.get("router", "")  # a litellm Router config: the name is one of its model groups
    endpoint = f"litellm router {router}" if router else transport.endpoint(spec.name, settings.get("api_base"))
    # the answer depends on where it comes from, not on the key or the credentials in a URL
    answer = {k: v for k, v in settings.items() if k not in ("api_base", "api_key")}
    if router:  # what the file's deployments are, not only its name
        answer["deployments"] = routers.fingerprint(router)
    key = cache_key(spec.name, wire.encode(ask.messages), {**answer, "endpoint": endpoint} if endpoint else answer)
    return Request(spec.name, ask.messages, settings, timeout, limits, endpoint, key, kind if sent else None)


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


@dataclass(frozen=True)
class Completion(Turn):
    """A model's reply as the call layers hand it on: a Turn, answered, from the cache, or kept in it."""

    @classmethod
    def answered(cls, reply: Reply, cost: float, latency: float) -> Completion:
        # a JSON "\ud800" from the server is no character: no later request (or terminal) could carry it
        text = LONE_SURROGATE.sub("\ufffd", reply.text)
        return cls(
            text,
            reply.prompt_tokens,
            reply.completion_tokens,
            cost,
            False,
            latency,
            reply.finish_reason,
            reply.calls,
            reply.response_model,
            reply.response_id,
        )

    @classmethod
    def from_cache(cls, entry: dict) -> Completion:
        return cls(
            entry["text"],
            entry["prompt_tokens"],
            entry["completion_tokens"],
            0.0,
            True,
            0.0,
            entry.get("finish_reason"),
            wire.cached_calls(entry),
        )

    def cache_entry(self) -> dict:
        """What the cache keeps: the text, tokens and finish reason, and the tool calls."""
        return {
            "text": self.text,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
            **wire.calls_to_cache(self.calls),
        }
