"""One sample's conversation at a tool loop: the typed messages so far (language/messages.py), each turn asked
through the one door (`Model.ask`), the calls of a reply run at once, and the trajectory they make."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ...messages import Ask, Message, Turn, prompted
from ...nodes.node import GraphNode
from ...nodes.trace import NodeTrace
from ..kind import Model
from ..model import parse_reply
from .toolbox import Toolbox, max_steps
from .toolcalls import (
    Answer,
    Step,
    ToolCall,
    ToolResult,
    describe_tools,
    kept_arguments,
    read_reply,
    reply_schema,
)

NO_ANSWER = "no answer"  # the error of a sample whose model never answered within max_steps (scored wrong)


def kept(steps: Sequence[Step]) -> Mapping[str, Any]:
    """A trajectory as the trace keeps it (NodeTrace.extra): none without a step."""
    return {"steps": [step.to_json() for step in steps]} if steps else {}


@dataclass
class Loop:
    """One sample's conversation at a tool loop: the messages so far, the steps taken, and what they cost."""

    node: GraphNode
    toolbox: Toolbox
    model: Model
    native: bool  # the model calls tools natively; else it is held to the text form
    prompt: str
    system: str | None
    messages: list[Message] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    pending: Turn | None = None  # the turn whose calls run next

    def __post_init__(self) -> None:
        if not self.native:
            self.prompt = (
                f"{self.prompt}\n\n{describe_tools(list(self.toolbox.specs.values()), self.toolbox.descriptions)}"
            )
        self.messages = list(prompted(self.prompt, self.system))

    async def run(self) -> NodeTrace:
        started = time.monotonic()
        tools = tuple(self.toolbox.offered()) if self.native else ()
        schema = None if self.native else reply_schema(list(self.toolbox.specs.values()))
        for left in reversed(range(max_steps(self.node))):
            ask = Ask(tuple(self.messages), schema=schema, tools=tools)
            turn = await self.model.ask(self.node.name, ask, self.node.model)
            if isinstance(turn, NodeTrace):  # the call failed for good: the sample is lost
                return replace(turn, prompt=self.prompt, system=self.system, extra=kept(self.steps))
            self.turns.append(turn)
            answer = self.answer(turn) if self.native or turn.calls else self.read(turn)
            if answer is not None:
                return self.trace(turn, answer, started)
            if left:
                await self.call_pending()
        if self.pending is not None and self.pending.calls:  # the calls of the last reply: recorded, never run
            self.steps.append(self.step(self.pending, ()))
        last = "still called a tool" if self.pending is not None and self.pending.calls else "was no answer"
        error = f"{NO_ANSWER} within max_steps = {max_steps(self.node)}: the model's last reply {last}"
        return self.trace(self.turns[-1], (None, error), started)

    def answer(self, turn: Turn) -> tuple[str | None, str | None] | None:
        """A native turn: the answer when it calls no tool (else its calls are run, and None)."""
        if not turn.calls:
            self.steps.append(self.step(turn, ()))
            return parse_reply(self.node, turn.text)
        kept_calls = tuple(replace(c, arguments=kept_arguments(c.arguments), written=None) for c in turn.calls)
        self.messages.append(Message.assistant(turn.text or None, kept_calls))
        self.pending = turn
        return None

    def read(self, turn: Turn) -> tuple[str | None, str | None] | None:
        """A turn in the text form: the answer, or the one call it makes (or why it is neither), then None."""
        said = read_reply(turn.text, self.toolbox.specs, len(self.steps) + 1)
        if isinstance(said, Answer):
            self.steps.append(self.step(turn, ()))
            return parse_reply(self.node, said.text)
        self.messages.append(Message.assistant(turn.text))
        self.pending = replace(turn, calls=(said,)) if isinstance(said, ToolCall) else turn
        if not isinstance(said, ToolCall):
            self.steps.append(self.step(turn, ()))
            self.messages.append(Message.user(said.why))
        return None

    def step(self, turn: Turn, results: Sequence[ToolResult]) -> Step:
        return Step(turn.text, turn.calls, tuple(results), turn.prompt_tokens, turn.completion_tokens)

    async def call_pending(self) -> None:
        """Run the pending turn's calls, all at once, and send each result back."""
        turn, self.pending = self.pending, None
        if turn is None or not turn.calls:
            return
        results = await asyncio.gather(*(self.toolbox.run(call) for call in turn.calls))
        self.model.count("tool steps", len(results))
        self.model.count("tool milliseconds", round(sum(r.seconds for r in results) * 1000))
        self.steps.append(self.step(turn, results))
        for result in results:
            if self.native:
                self.messages.append(Message.tool(result.call.id, result.content))
            else:
                self.messages.append(Message.user(f"Result of {result.call.name}: {result.content}"))

    def trace(self, last: Turn, parsed: tuple[str | None, str | None], started: float) -> NodeTrace:
        output, error = parsed
        if error is not None and not error.startswith(NO_ANSWER):
            self.model.count("forward parse failures")
        return NodeTrace(
            self.node.name,
            self.prompt,
            last.text,
            output,
            error,
            sum(t.prompt_tokens for t in self.turns),
            sum(t.completion_tokens for t in self.turns),
            time.monotonic() - started,
            all(t.cached for t in self.turns),
            cost=sum(t.cost for t in self.turns),
            system=self.system,
            cut_off=last.finish_reason == "length",
            extra=kept(self.steps),
        )
