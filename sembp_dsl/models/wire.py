"""The chat-completions wire shape (OpenAI's JSON, which litellm, llama.cpp and every OpenAI-compatible server
speak): the one module that knows it. Every other module passes typed messages (language/messages.py) and
typed replies (transport.Reply); `tests/test_layout.py` fails if another module names a key of the shape.

- `encode`: a conversation as the `messages` of a request, with a prompt-cache marker on its stable prefix for a
  provider that wants one (Anthropic's `cache_control`, through litellm).
- `reply_of`: a response body as a Reply, its tool calls decoded (arguments that are not a JSON object kept,
  cut, under a key no tool's schema takes, so the model is told they do not fit).
- `calls_to_cache`, `cached_calls`: a reply's tool calls as the response cache keeps them.
- `choice`: a Reply as the one choice of a response (litellm's Router reads replies in that shape).
- `text_only`: litellm's messages (dicts or its pydantic objects, text parts or a string) as plain text
  messages, for a model that takes nothing else (the embedded model's litellm handler).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..language.kinds.agent.toolcalls import bounded
from ..language.messages import Message, ToolCall
from ..language.nodes.shapes import MAX_JSON_DEPTH, nesting
from . import prices
from .faults import BadReply
from .reply import Reply

NAME_CHARS = 256  # the longest model name or reply id a reply is taken at its word for
CACHE_MARKER = {"type": "ephemeral"}  # Anthropic's prompt-cache breakpoint: the prefix up to it is cached


def encode(messages: Sequence[Message], marked: bool = False) -> list[dict]:
    """A conversation as a request's `messages`. `marked`: the stable prefix (the leading system messages, the
    same for every sample of a node) carries a prompt-cache marker, for a provider that caches only there."""
    sent = [_message(m) for m in messages]
    leading = 0
    while leading < len(messages) and messages[leading].role == "system":
        leading += 1
    if marked and leading:
        last = sent[leading - 1]
        last["content"] = [{"type": "text", "text": last["content"], "cache_control": dict(CACHE_MARKER)}]
    return sent


def _message(message: Message) -> dict:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.answers, "content": message.content}
    if message.calls:
        return {
            "role": message.role,
            "content": message.content,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments_text()},
                }
                for call in message.calls
            ],
        }
    return {"role": message.role, "content": message.content}


def reply_of(body: dict, model: str) -> Reply:
    """The text, tool calls, tokens and price of a chat completion (a dict, or litellm's ModelResponse as a dict);
    BadReply when there is no text (never let such a reply be cached as "")."""
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices:
        raise BadReply("no choices in the reply" if choices is None else "empty choices in the reply")
    choice_ = choices[0] if isinstance(choices[0], dict) else {}
    message = choice_.get("message") or {}
    calls = tool_calls(message.get("tool_calls"))
    text = message.get("content")
    if text is None and calls:  # a reply that only calls tools
        text = ""
    if not isinstance(text, str):
        raise BadReply("the reply's content is null")
    usage = body.get("usage") or {}
    prompt_tokens = int(usage.get("prompt_tokens") or 0)
    completion_tokens = int(usage.get("completion_tokens") or 0)
    cached = cached_tokens(usage, prompt_tokens)
    return Reply(
        text,
        prompt_tokens,
        completion_tokens,
        prices.cost(model, prompt_tokens, completion_tokens, cached),
        choice_.get("finish_reason"),
        calls,
        _text(body.get("model")),
        _text(body.get("id")),
        cached_tokens=cached,
    )


def cached_tokens(usage: dict, prompt_tokens: int) -> int:
    """The prompt tokens a provider's prompt cache served (OpenAI's `prompt_tokens_details.cached_tokens`,
    Anthropic's `cache_read_input_tokens`, which litellm keeps), at most the prompt's."""
    details = usage.get("prompt_tokens_details")
    found = details.get("cached_tokens") if isinstance(details, dict) else None
    if not found:
        found = usage.get("cache_read_input_tokens")
    return min(int(found), prompt_tokens) if isinstance(found, (int, float)) and found > 0 else 0


def _text(value: Any) -> str | None:
    """A reply's name or id when it is one: short text (a server may send anything there, and each call's span
    carries it)."""
    return value if isinstance(value, str) and 0 < len(value) <= NAME_CHARS else None


def tool_calls(listed: Any) -> tuple[ToolCall, ...]:
    """A reply's native tool calls, typed; a call without a name is no call."""
    calls = []
    for index, call in enumerate(listed if isinstance(listed, list) else []):
        function = (call.get("function") if isinstance(call, dict) else None) or {}
        if isinstance(function.get("name"), str):
            sent = function.get("arguments")
            text = sent if isinstance(sent, str) else json.dumps(sent or {})
            id_ = str(call.get("id") or f"call_{index}")
            calls.append(ToolCall(id_, bounded(function["name"]), arguments(text), text))
    return tuple(calls)


def arguments(text: str) -> dict:
    """A native call's arguments as the loop reads them; arguments that are not a JSON object (or one nested past
    MAX_JSON_DEPTH, which no schema, record or request could carry) are kept, cut, under a key no schema takes."""
    text = text or "{}"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: `[[[...]]]` 20,000 deep
        value = None
    if not isinstance(value, dict):
        return {"(not a JSON object)": bounded(text)}
    if nesting(value) > MAX_JSON_DEPTH:
        return {"(nested too deeply)": bounded(text)}
    return value


def calls_to_cache(calls: Sequence[ToolCall]) -> dict:
    """A reply's tool calls as a cache entry keeps them (none: nothing), each with its arguments' JSON text."""
    kept = [{"id": c.id, "name": c.name, "arguments": c.arguments_text()} for c in calls]
    return {"tool_calls": kept} if kept else {}


def cached_calls(entry: dict) -> tuple[ToolCall, ...]:
    """The tool calls a cache entry keeps."""
    listed = entry.get("tool_calls", ())
    return tuple(ToolCall(str(c["id"]), str(c["name"]), arguments(c["arguments"]), c["arguments"]) for c in listed)


def choice(reply: Reply) -> dict:
    """A reply as the one choice of a response (what litellm's Router reads back)."""
    return {
        "index": 0,
        "finish_reason": reply.finish_reason or "stop",
        "message": {"role": "assistant", "content": reply.text},
    }


def text_only(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """Plain dicts with text content (litellm may hand over pydantic objects or content-part lists)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        d = dict(m) if not hasattr(m, "model_dump") else m.model_dump(exclude_none=True)
        content = d.get("content")
        if isinstance(content, list):
            content = "".join(
                part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"
            )
        out.append({"role": d.get("role", "user"), "content": content or ""})
    return out
