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
from ..language.nodes.shapes import Shape
from . import constraints
from .cache import cache_key
from .faults import LLMError
from .prices import DECLARED
from .routing import Routers
from .transport import Reply, Transport

LIMITS = ("concurrency", "rpm", "tpm")  # a model block's bounds on sending: kept here, never sent
LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # half a pair: JSON can say it, no request can carry it


@dataclass(frozen=True)
class ResolvedModel(ModelSpec):
    """A role's or a named model once chosen (the pipeline's, a flag's or the embedded one): its name is known."""

    name: str


@dataclass(frozen=True)
class Request:
    model: str
    messages: list[dict]
    settings: dict = field(repr=False)  # what is sent: sampling settings, api_base, api_key, router
    timeout: float
    limits: Mapping[str, int]
    endpoint: str | None  # where the call goes, without credentials; None: the provider's default
    key: str  # the cache key
    constraint: str | None = None  # "grammar" or "schema": the reply's shape is sent with it (constraints.py)

    @property
    def routed(self) -> bool:
        """Sent through a litellm Router config file, whose name is one of the file's model groups."""
        return bool(self.settings.get("router"))

    def secrets(self, routers: Routers) -> tuple[str, ...]:
        """What a failure's message must never show: the call's own key, the usual one, a router file's keys."""
        found = (
            self.settings.get("api_key"),
            os.environ.get("OPENAI_API_KEY"),
            *routers.secrets.get(self.settings.get("router", ""), ()),
        )
        return tuple(s for s in found if s)


def messages_of(prompt: str, system: str | None = None) -> list[dict]:
    """One prompt as chat messages, after its `system` message if it has one."""
    return [*([{"role": "system", "content": system}] if system else []), {"role": "user", "content": prompt}]


def prepare(
    spec: ResolvedModel,
    messages: list[dict],
    timeout: float,
    transport: Transport,
    routers: Routers,
    shape: Shape | None = None,
    tools: list[dict] | None = None,
    schema: dict | None = None,
) -> Request:
    """The request of `messages` to the model `spec`, sent by `transport`, held to the reply's `shape` where the
    model takes it. A turn of a tool loop: `tools` offered natively, or each reply held to the JSON `schema` of
    the text form, where the model takes a schema (or a grammar: the embedded transport makes one of it)."""
    settings: dict[str, Any] = dict(spec.settings)  # each key's type is the checker's to hold
    kind = constraints.form(spec.name, settings, transport)
    settings.pop("constrain", None)  # sbpc's to apply, never sent
    for price in DECLARED:  # sbpc's to charge, never sent
        settings.pop(price, None)
    sent = constraints.request(shape, kind, constraints.max_tokens(settings))
    if tools:
        sent = {**sent, "tools": tools}
    if schema is not None:
        sent = {**sent, **constraints.schema_request(schema, kind, constraints.max_tokens(settings))}
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
    key = cache_key(spec.name, messages, {**answer, "endpoint": endpoint} if endpoint else answer)
    return Request(spec.name, messages, settings, timeout, limits, endpoint, key, kind if sent else None)


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
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost: float
    cached: bool
    latency: float
    finish_reason: str | None = None  # "length": the reply was cut off by max_tokens (or at its grammar's bound)
    tool_calls: tuple[dict, ...] = ()  # native tool calls: {"id", "name", "arguments" (JSON text)} each
    response_model: str | None = None  # as the reply named them (none from the cache: no reply was had)
    response_id: str | None = None

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
            reply.tool_calls,
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
            tuple(entry.get("tool_calls", ())),
        )

    def cache_entry(self) -> dict:
        return {
            "text": self.text,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
            **({"tool_calls": list(self.tool_calls)} if self.tool_calls else {}),
        }
