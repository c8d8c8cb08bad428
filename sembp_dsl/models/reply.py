"""One attempt's reply, whichever transport it came by, typed: what the call layers read of it."""

from __future__ import annotations

from typing import NamedTuple

from ..language.messages import ToolCall
from .limits import Quota


class Reply(NamedTuple):
    """A chat completion with text, whichever transport it came by."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cost: float | None  # dollars; None when litellm's price table does not know the model
    finish_reason: str | None  # "length": cut off by max_tokens
    calls: tuple[ToolCall, ...] = ()  # the native tool calls it makes, decoded (wire.py)
    response_model: str | None = None  # the model that answered, as the reply names it (a dated version, say)
    response_id: str | None = None  # the reply's own id, as the provider's logs know it
    quota: Quota | None = None  # what the provider's rate-limit headers say is left (limits.py)
    cached_tokens: int = 0  # of the prompt tokens, those the provider's prompt cache served (priced lower)
