"""What a node's kind and a model say to each other, typed: the messages of a conversation, the tool calls in
them, one request (`Ask`), what the model can be held to (`Capabilities`) and its reply (`Turn`).

These sit at the lowest floor that needs them: a kind builds a conversation (the tool loop's) and reads the
reply, and kinds sit below the models stage, which sends the conversation and decodes the reply. How a message
looks on the wire (OpenAI's chat-completions JSON) is models/wire.py's alone; nothing here names a key of it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from .nodes.shapes import Shape

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True)
class ToolCall:
    """A call the model asked for: its id (a tool result answers it by that), the tool's name and its arguments."""

    id: str
    name: str
    arguments: Mapping = field(hash=False)
    written: str | None = field(default=None, compare=False, repr=False)  # the arguments as the model wrote them

    def arguments_text(self) -> str:
        """The arguments as JSON text: as the model wrote them, when it did (spans and the cache keep its words)."""
        return self.written if self.written is not None else json.dumps(dict(self.arguments), ensure_ascii=False)


@dataclass(frozen=True)
class Message:
    """One message of a conversation: who says it, its text, the tools an assistant's message calls, and the call
    a tool's message answers."""

    role: Role
    content: str | None
    calls: tuple[ToolCall, ...] = ()
    answers: str | None = None  # a tool message's: the id of the call whose result it is

    @classmethod
    def system(cls, text: str) -> Message:
        return cls("system", text)

    @classmethod
    def user(cls, text: str) -> Message:
        return cls("user", text)

    @classmethod
    def assistant(cls, text: str | None, calls: tuple[ToolCall, ...] = ()) -> Message:
        return cls("assistant", text, calls)

    @classmethod
    def tool(cls, call_id: str, text: str) -> Message:
        return cls("tool", text, answers=call_id)


def prompted(prompt: str, system: str | None = None) -> tuple[Message, ...]:
    """One prompt as a conversation, after its `system` message if it has one."""
    return (*((Message.system(system),) if system else ()), Message.user(prompt))


@dataclass(frozen=True)
class Ask:
    """One request to a model, whichever kind makes it: the conversation so far, and how the reply is held: to a
    reply's `shape` (grammar or JSON Schema, as the model takes), to a JSON `schema` (a tool loop's text form),
    or free, with `tools` offered natively (each as `ToolSpec.to_openai` gives it)."""

    messages: tuple[Message, ...]
    shape: Shape | None = None
    schema: Mapping | None = None
    tools: tuple[Mapping, ...] = ()


@dataclass(frozen=True)
class Capabilities:
    """What a model can be held to and offered, as the transport that sends its calls (and its model block) says:
    the constraint its replies get ("grammar", "schema" or "none"), whether it calls tools natively, and whether it
    runs on this machine (free, one call at a time: the embedded model)."""

    constraint: str = "none"
    tools: bool = False
    local: bool = False

    def holds(self, shape: Shape | None) -> bool:
        """Whether a reply of `shape` reaches this model as a JSON Schema (else a record's fields are told in
        words)."""
        return self.constraint == "schema" and shape is not None and shape.schema() is not None


@dataclass(frozen=True)
class Turn:
    """A model's reply to one Ask: its text (as the parsers read it), the tools it calls (natively: beside the
    text; in a text form, none: the text is read), what it cost, and what the reply named itself."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    cost: float
    cached: bool
    latency: float
    finish_reason: str | None = None  # "length": cut off by max_tokens (or at its grammar's bound)
    calls: tuple[ToolCall, ...] = ()
    response_model: str | None = None  # as the reply named them (none from the cache: no reply was had)
    response_id: str | None = None
