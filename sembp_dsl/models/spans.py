"""What a model call's span says (telemetry.py), in OpenTelemetry's GenAI semantic conventions: the operation, the
provider and model, the sampling settings asked, tokens, finish reason; the cost and the cache as sbpc.*; the
messages and the reply (gen_ai.input.messages, gen_ai.output.messages) only where the user opted in.

Each attribute is taken by name from what is known of the call, never a request's settings whole: those hold
its key.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..language.blocks.providers import LITELLM, OWN
from ..language.messages import Message, ToolCall
from ..telemetry import Value, capped, server
from .request import Completion, Request, ResolvedModel

SAMPLING = {  # a request's settings the conventions name, as they name them
    "temperature": "gen_ai.request.temperature",
    "max_tokens": "gen_ai.request.max_tokens",
    "top_p": "gen_ai.request.top_p",
    "seed": "gen_ai.request.seed",
}


def provider_and_model(model: str) -> tuple[str | None, str]:
    """A litellm model string's provider and the model's own name (`openai/gpt-4o-mini`: openai, gpt-4o-mini); a
    bare name is OpenAI's; a prefix that is no provider is part of the name (None: provider unknown)."""
    prefix, _, rest = model.partition("/")
    if rest and (prefix in LITELLM or prefix in OWN):
        return prefix, rest
    return ("openai", model) if not rest else (None, model)


def name_of(request: Request) -> str:
    """The span's name, as the conventions make it: `{operation} {model}`."""
    return f"chat {provider_and_model(request.model)[1]}"


def asked(role: str, spec: ResolvedModel, request: Request) -> dict[str, Value | None]:
    """What is known of a call before it is sent."""
    provider, model = provider_and_model(request.model)
    numbers = {
        name: request.settings[key]
        for key, name in SAMPLING.items()
        if isinstance(request.settings.get(key), (int, float)) and not isinstance(request.settings.get(key), bool)
    }
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": provider,
        "gen_ai.system": provider,  # the name older viewers read the provider by
        "gen_ai.request.model": model,
        **numbers,
        **server(request.endpoint),
        "sbpc.role": role,
        "sbpc.model": request.model,
        "sbpc.model.name": spec.role if spec.role != role else None,  # a named model of the pipeline (`model fast`)
        "sbpc.constraint": request.constraint,
    }


def answered(result: Completion) -> dict[str, Value | None]:
    """What is known of a call once answered (from the cache or a call in flight too). A reply had without a call
    used no tokens: a viewer that prices calls by their tokens (Phoenix, Langfuse) must not charge it."""
    return {
        "gen_ai.usage.input_tokens": 0 if result.cached else result.prompt_tokens,
        "gen_ai.usage.output_tokens": 0 if result.cached else result.completion_tokens,
        "gen_ai.response.finish_reasons": [result.finish_reason] if result.finish_reason else None,
        "gen_ai.response.model": result.response_model,
        "gen_ai.response.id": result.response_id,
        "sbpc.cost_usd": result.cost,
        "sbpc.cached": result.cached,
        "sbpc.tool_calls": len(result.calls) or None,
    }


def input_messages(messages: Sequence[Message]) -> dict[str, Value]:
    """The messages sent, as gen_ai.input.messages (JSON: each a role and its parts)."""
    return {"gen_ai.input.messages": json.dumps([_message(m) for m in messages], ensure_ascii=False)}


def output_messages(result: Completion) -> dict[str, Value]:
    """The reply, as gen_ai.output.messages."""
    parts: list[dict] = [{"type": "text", "content": capped(result.text)}] if result.text else []
    parts += [_call(c) for c in result.calls]
    reply = {"role": "assistant", "parts": parts, "finish_reason": result.finish_reason or "stop"}
    return {"gen_ai.output.messages": json.dumps([reply], ensure_ascii=False)}


def _message(message: Message) -> dict:
    if message.role == "tool":
        return {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": message.answers, "response": capped(message.content or "")}],
        }
    parts: list[dict] = [{"type": "text", "content": capped(message.content)}] if message.content else []
    parts += [_call(call) for call in message.calls]
    return {"role": message.role, "parts": parts}


def _call(call: ToolCall) -> dict:
    return {"type": "tool_call", "id": call.id, "name": call.name, "arguments": capped(call.arguments_text())}
