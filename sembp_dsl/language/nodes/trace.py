"""What one sample's run left behind: a `NodeTrace` per node and the sample's `Trace`.

Every kind of node writes its NodeTrace (language/kinds), the runtime collects them (runtime/forward.py), and
the backward pass, the metrics and the records read them. What a kind keeps beyond the fields every node has (a
tool loop's `steps`) is its `extra`: plain JSON that the trace, the run record and every display carry as it is,
and only the kind reads (its `shown`, language/kinds). A node's `error` opens with the words of its cause
(`call failed`, `function failed`, ...): what a sample lost, and what it got wrong, are told apart by them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a type only: why a model call failed is the models stage's to say (models/faults.py)
    from ...models.faults import Failure

CALL_FAILED, NOT_RUN, NOT_RENDERED = "call failed", "not run", "template failed"  # a sample lost
FUNCTION_FAILED, NOT_REACHED = "function failed", "not reached"  # a sample's failure, scored wrong (not lost)
PARSE_ERROR = "parse error"  # any other error: a reply that could not be read as the node's type


def answer_words(output: object) -> str:
    """An answer as a listing says it beside the expected one: quoted, or `no answer` when there was none (a
    Python None is no word of the user's)."""
    return "no answer" if output is None else repr(output)


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
    taken: bool = True  # False: a branch not taken (language/nodes/branches), so no call; neither an error nor lost
    items: tuple[NodeTrace, ...] = ()  # a mapped node's runs, one per item (language/nodes/maps)
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)  # its kind's own data, as JSON (`steps`)

    def __post_init__(self) -> None:
        clash = set(self.extra) & FIELDS
        if clash:  # a kind's mistake, not the user's: its data would hide a field every node has
            raise ValueError(f"a kind's trace data may not be named as a NodeTrace field: {sorted(clash)}")

    @classmethod
    def without_reply(cls, node: str, prompt: str, reason: str, failure: Failure | None = None) -> NodeTrace:
        return cls(node, prompt, "", None, reason, 0, 0, 0.0, False, failure)

    @classmethod
    def not_taken(cls, node: str) -> NodeTrace:
        """A node on a branch the sample did not take: it did not run, and successors only it feeds do not."""
        return cls(node, "", "", None, None, 0, 0, 0.0, False, taken=False)

    def to_json(self) -> dict:
        """Its fields as JSON; `taken` and `items` only where a branch or a map gives them a say, then its kind's
        own data, key by key (other nodes' JSON is as it always was)."""
        out = {**vars(self), "failure": self.failure.to_json() if self.failure else None}
        del out["taken"], out["items"], out["extra"]
        return {**out, **self.flow(NodeTrace.to_json), **self.extra}

    def recorded(self) -> dict:
        """What a run record keeps of it (records/record.py): prompt, reply, output and error, what a branch or a
        map says, and its kind's own data."""
        out = {"prompt": self.prompt, "reply": self.reply, "output": self.output, "error": self.error}
        return {**out, **self.flow(NodeTrace.recorded), **self.extra}

    def flow(self, form: Callable[[NodeTrace], dict]) -> dict:
        """What a branch (`taken`: false) or a map (its `items`, each in `form`) says of it, when one does."""
        return {
            **({} if self.taken else {"taken": False}),
            **({"items": [form(i) for i in self.items]} if self.items else {}),
        }

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


FIELDS = frozenset(f.name for f in fields(NodeTrace)) - {"extra"}  # a node's JSON keys no kind may take


def extra_of(node: Mapping[str, Any]) -> dict[str, Any]:
    """A kind's own data in a node's JSON (NodeTrace.to_json or .recorded): every key that is no field's."""
    return {key: value for key, value in node.items() if key not in FIELDS}


@dataclass(frozen=True)
class Shown:
    """A part of a node's trace as people are shown it, beyond its prompt and reply: what a kind says of its own
    data (NodeKind.shown). `run --trace` and the report print it under its title; `sbpc show` its text alone."""

    title: str
    text: str


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
