"""What a tool-calling node and its model say to each other: calls, results, and the trajectory they make.

A model that calls tools natively (litellm's `tools=`) answers with tool calls beside its text. Every other
model, the embedded one included, is held to a text form: each reply is ONE JSON object, either
`{"tool": NAME, "arguments": {...}}` or `{"answer": ...}`, whose JSON Schema (`reply_schema`) is built from
the tools' schemas, so a decoder that takes a schema or a grammar makes only well-formed calls. Whatever
arrives is read back here (`read_reply`), and whatever is wrong with it (an unknown tool, arguments that do
not fit, no JSON at all) is said to the model as that call's result, never raised.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...messages import ToolCall
from ...nodes.shapes import first_object
from ...signatures import ToolSpec

if TYPE_CHECKING:
    import jsonschema

#: The most characters of one tool result the model is shown (and the trajectory keeps): megabytes of text
#: from a tool would fill the context and the run record.
RESULT_CHARS = 4000
ANSWER = "answer"


def call_json(call: ToolCall) -> dict:
    """A call as a trajectory keeps it (the run record)."""
    return {"id": call.id, "name": call.name, "arguments": kept_arguments(call.arguments)}


def call_from_json(data: Mapping) -> ToolCall:
    """A call as a run record keeps it."""
    return ToolCall(str(data.get("id", "")), str(data.get("name", "")), dict(data.get("arguments") or {}))


def kept_arguments(arguments: Mapping) -> dict:
    """A call's arguments as the record and the conversation keep them: whole, or past RESULT_CHARS of JSON cut
    as a result is (a model's 5 MB argument was echoed back and recorded whole)."""
    text = json.dumps(dict(arguments), ensure_ascii=False, default=str)
    return dict(arguments) if len(text) <= RESULT_CHARS else {"(cut)": bounded(text)}


@dataclass(frozen=True)
class ToolResult:
    call: ToolCall
    content: str  # what the model is shown: the value as text, or what went wrong
    error: bool = False  # the tool raised, timed out, returned what has no text form, or was not called
    seconds: float = 0.0

    def to_json(self) -> dict:
        return {"call": call_json(self.call), "content": self.content, "error": self.error, "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: Mapping) -> ToolResult:
        call = call_from_json(data.get("call") or {})
        return cls(call, str(data.get("content", "")), bool(data.get("error")), float(data.get("seconds") or 0.0))


@dataclass(frozen=True)
class Step:
    """One turn of the loop: the model's reply, the calls it made and what they returned."""

    reply: str
    calls: tuple[ToolCall, ...] = ()
    results: tuple[ToolResult, ...] = ()
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def to_json(self) -> dict:
        return {
            "reply": self.reply,
            "calls": [call_json(c) for c in self.calls],
            "results": [r.to_json() for r in self.results],
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }

    @classmethod
    def from_json(cls, data: Mapping) -> Step:
        """A step as a run record keeps it (`sbpc show` and the report read it back)."""
        return cls(
            str(data.get("reply", "")),
            tuple(call_from_json(c) for c in data.get("calls") or ()),
            tuple(ToolResult.from_json(r) for r in data.get("results") or ()),
            int(data.get("prompt_tokens") or 0),
            int(data.get("completion_tokens") or 0),
        )


#: What the compact trajectory keeps of one argument value and of one result (the backward question shows it).
SHOWN_ARGUMENT, SHOWN_RESULT = 80, 200


def compact(steps: Sequence[Step], limit: int = 12) -> str:
    """A trajectory in a few lines, each value and result cut short: `1. lookup(place="Kesh") -> population of
    Kesh: 18400`, then the answer. At most `limit` calls are shown, and how many were left out."""
    lines: list[str] = []
    for index, step in enumerate(steps):
        if not step.calls and index < len(steps) - 1:  # neither a call nor the answer (the text form)
            lines.append(
                f"{len(lines) + 1}. (a reply that neither calls a tool nor answers: {clip(step.reply, SHOWN_ARGUMENT)})"
            )
        for call, result in zip(step.calls, (*step.results, *([None] * len(step.calls)))):
            lines.append(f"{len(lines) + 1}. {call_line(call, result)}")
    left = len(lines) - limit
    lines = lines[:limit] + ([f"... {left} more calls"] if left > 0 else [])
    if steps and not steps[-1].calls:
        lines.append(f"then answered: {clip(' '.join(steps[-1].reply.split()), SHOWN_RESULT)}")
    return "\n".join(lines)


def call_line(call: ToolCall, result: ToolResult | None) -> str:
    """One call and what it returned, each value cut short: `lookup(place="Kesh") -> population of Kesh: 18400`."""
    shown = ", ".join(
        f"{key}={clip(json.dumps(value, ensure_ascii=False), SHOWN_ARGUMENT)}" for key, value in call.arguments.items()
    )
    outcome = "(not run)" if result is None else clip(" ".join(result.content.split()), SHOWN_RESULT)
    return f"{call.name}({shown}) -> {'error: ' if result and result.error else ''}{outcome}"


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def bounded(text: str, limit: int = RESULT_CHARS) -> str:
    """Text cut to `limit` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[... {len(text) - limit} more characters not shown]"


#: The most characters of one string in a text-form reply: a decoder held to the schema then closes every string
#: and the object within a small model's max_tokens, where an unbounded one rambles until it is cut off.
TEXT_FORM_CHARS = 160


def reply_schema(tools: Sequence[ToolSpec], answer: dict | None = None) -> dict:
    """The JSON Schema of one reply in the text form: a call of one of `tools` with arguments that fit its
    schema, or the answer (`answer`: the answer's own schema; a string by default); every string at most
    TEXT_FORM_CHARS long."""
    calls = [
        {
            "type": "object",
            "properties": {"tool": {"const": tool.name}, "arguments": bounded_strings(tool.schema())},
            "required": ["tool", "arguments"],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    final = {
        "type": "object",
        "properties": {ANSWER: bounded_strings(answer or {"type": "string"})},
        "required": [ANSWER],
        "additionalProperties": False,
    }
    return {"anyOf": [*calls, final]}


def bounded_strings(schema: dict) -> dict:
    """The schema with every string that has no maxLength (nor a fixed set of values) given TEXT_FORM_CHARS."""

    def walk(value: object) -> object:
        if isinstance(value, dict):
            return bounded_strings(value)
        return [walk(v) for v in value] if isinstance(value, list) else value

    out = {key: walk(value) for key, value in schema.items()}
    for key in ("properties", "$defs"):  # maps of names to schemas, not schemas
        if isinstance(schema.get(key), dict):
            out[key] = {name: walk(value) for name, value in schema[key].items()}
    if out.get("type") == "string" and not {"maxLength", "enum", "const"} & set(out):
        out["maxLength"] = TEXT_FORM_CHARS
    return out


def describe_tools(tools: Sequence[ToolSpec], descriptions: Mapping[str, str]) -> str:
    """The tools and the reply form, in words, for a model held to the text form (it sees no `tools=`)."""
    lines = ["You can call these tools. Reply with ONE JSON object and nothing else:"]
    lines.append('  to call a tool: {"tool": "<name>", "arguments": {...}}')
    lines.append('  to give your final answer: {"answer": "<your answer>"}')
    lines.append("Tools:")
    for tool in tools:
        text = descriptions.get(tool.name, tool.description)
        lines.append(f"- {tool.name}: {text}".rstrip(": "))
        lines.append(f"  arguments: {json.dumps(tool.schema()['properties'], ensure_ascii=False)}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Answer:
    text: str


@dataclass(frozen=True)
class Unreadable:
    """A reply in the text form that is neither a call nor an answer; `why` is said back to the model."""

    why: str


def read_reply(text: str, tools: Mapping[str, ToolSpec], step: int) -> ToolCall | Answer | Unreadable:
    """One reply in the text form. A call of an unknown tool is still a call (its result says so)."""
    value = first_object(text)
    if value is None:
        return Unreadable('no JSON object in the reply: reply {"tool": ..., "arguments": {...}} or {"answer": ...}')
    if ANSWER in value and "tool" not in value:
        answer = value[ANSWER]
        return Answer(answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False))
    name = value.get("tool")
    if not isinstance(name, str):
        return Unreadable('the JSON object has neither "tool" nor "answer"')
    arguments = value.get("arguments", {})
    return ToolCall(f"call_{step}", bounded(name), arguments if isinstance(arguments, dict) else {"": arguments})


def argument_problem(call: ToolCall, tools: Mapping[str, ToolSpec]) -> str | None:
    """Why a call cannot be made (an unknown tool, arguments that do not fit its schema), or None."""
    tool = tools.get(call.name)
    if tool is None:
        return f"there is no tool '{call.name}'; the tools are {', '.join(tools) or 'none'}"
    import jsonschema  # ~50 ms to import (measured): only a tool's call pays it, never a pipeline without tools

    try:
        validator(tool).validate(dict(call.arguments))
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path)
        return (
            f"the arguments do not fit {call.name}'s schema" + (f" at '{where}'" if where else "") + f": {exc.message}"
        )
    return None


@functools.lru_cache(maxsize=256)
def validator(tool: ToolSpec) -> jsonschema.Draft202012Validator:
    """A tool's arguments' validator, made once: `jsonschema.validate` checks the schema itself on every call,
    which took most of a tool step's CPU (bench/agent_overhead.py)."""
    import jsonschema  # ~50 ms to import (measured): only a tool's call pays it, never a pipeline without tools

    return jsonschema.Draft202012Validator(tool.schema())
