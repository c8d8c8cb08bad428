"""What one sample's run left behind: a `NodeTrace` per node and the sample's `Trace`.

Every kind of node writes its NodeTrace (language/kinds), the runtime collects them (runtime/forward.py), and
the backward pass, the metrics and the records read them. A node's `error` opens with the words of its cause
(`call failed`, `function failed`, ...): what a sample lost, and what it got wrong, are told apart by them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .toolcalls import Step

if TYPE_CHECKING:  # a type only: why a model call failed is the models stage's to say (models/faults.py)
    from ..models.faults import Failure

CALL_FAILED, NOT_RUN, NOT_RENDERED = "call failed", "not run", "template failed"  # a sample lost
FUNCTION_FAILED, NOT_REACHED = "function failed", "not reached"  # a sample's failure, scored wrong (not lost)
PARSE_ERROR = "parse error"  # any other error: a reply that could not be read as the node's type


@dataclass(frozen=True)
class NodeTrace:
    node: str
    prompt: str
    reply: str
    output: str | None  # parsed; None when the reply could not be parsed
    error: str | None  # why not
    prompt_tokens: int
    completion_tokens: int
    latency: float
    cached: bool
    failure: Failure | None = None  # why the call failed (status, endpoint, the provider's words), if it did
    cost: float = 0.0  # dollars, by the price table (0 from the cache, or when the model has no price)
    system: str | None = None  # the system message sent before the prompt, if any
    cut_off: bool = False  # the reply ended at a length limit (max_tokens, or its grammar's bound), not by itself
    taken: bool = True  # False: a branch not taken (language/branches), so no call; neither an error nor lost
    items: tuple[NodeTrace, ...] = ()  # a mapped node's runs, one per item (language/maps)
    steps: tuple[Step, ...] = ()  # a tool loop's trajectory: each reply, its tool calls and their results

    @classmethod
    def without_reply(cls, node: str, prompt: str, reason: str, failure: Failure | None = None) -> NodeTrace:
        return cls(node, prompt, "", None, reason, 0, 0, 0.0, False, failure)

    @classmethod
    def not_taken(cls, node: str) -> NodeTrace:
        """A node on a branch the sample did not take: it did not run, and successors only it feeds do not."""
        return cls(node, "", "", None, None, 0, 0, 0.0, False, taken=False)

    def to_json(self) -> dict:
        """Its fields as JSON; `taken`, `items` and `steps` only where a branch, a map or a tool loop gives them a
        say (other nodes' JSON is as it always was)."""
        out = {**vars(self), "failure": self.failure.to_json() if self.failure else None}
        del out["taken"], out["items"], out["steps"]
        if not self.taken:
            out["taken"] = False
        if self.items:
            out["items"] = [item.to_json() for item in self.items]
        if self.steps:
            out["steps"] = [step.to_json() for step in self.steps]
        return out

    @property
    def lost(self) -> bool:
        """No reply at all: the call failed for good, the prompt did not render, or a predecessor was lost."""
        return self.error is not None and self.error.startswith((CALL_FAILED, NOT_RUN, NOT_RENDERED))

    @property
    def cause(self) -> str | None:
        """What failed, by the words its error opens with (a call, a template, a function, a predecessor), else a
        reply that could not be read as the node's type; None without an error."""
        if self.error is None:
            return None
        causes = (CALL_FAILED, NOT_RUN, NOT_RENDERED, FUNCTION_FAILED, NOT_REACHED)
        return next((cause for cause in causes if self.error.startswith(cause)), PARSE_ERROR)

    @property
    def blocked(self) -> bool:
        """No value for successors: a function failed, or this node was not reached because one did."""
        return self.output is None and self.error is not None and self.error.startswith((FUNCTION_FAILED, NOT_REACHED))

    @property
    def value(self) -> str:
        """What successors are shown: the parsed output, or the raw reply when parsing failed."""
        return self.output if self.output is not None else self.reply


@dataclass(frozen=True)
class Trace:
    inputs: Mapping[str, str]
    nodes: Mapping[str, NodeTrace]  # in topological order
    output_node: str
    output_field: str | None = None  # the field scored, of a record output

    @property
    def final(self) -> NodeTrace:
        return self.nodes[self.output_node]

    @property
    def output(self) -> str | None:
        """The answer scored: the output node's, or its field's (as text: a JSON value that is not a string
        as JSON)."""
        output = self.final.output
        if output is None or self.output_field is None:
            return output
        value = json.loads(output)[self.output_field]
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    @property
    def values(self) -> dict[str, str]:
        """Every input and node value, as successors saw them."""
        return {**self.inputs, **{name: t.value for name, t in self.nodes.items()}}

    def to_json(self) -> dict:
        return {
            "inputs": dict(self.inputs),
            "output": self.output,
            "nodes": {name: t.to_json() for name, t in self.nodes.items()},
        }
