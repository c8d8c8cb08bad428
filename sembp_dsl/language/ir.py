"""The typed IR: what a pipeline *is*, whichever syntax (.sbp or YAML) it was written in.

Every element keeps the span of the text it came from. Spans never take part in
equality, so the same pipeline written in both syntaxes compares equal.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

Value = str | int | float | bool | tuple[str, ...]  # a tuple: a list of names, `tools = [lookup, calc]`


@contextmanager
def gc_paused():
    """Building or walking a big IR allocates millions of acyclic objects; collecting
    them mid-way finds nothing and makes the work grow faster than the input."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Span(NamedTuple):
    """A region of a source file: 1-based line/column for people, offsets for rewriting.

    A named tuple rather than a dataclass only because a big pipeline makes one per
    name it mentions, and tuples are built several times faster.
    """

    file: str
    line: int
    column: int
    end_line: int
    end_column: int
    start: int
    end: int


def _span() -> Span:
    return field(compare=False, repr=False, kw_only=True)


def optional(default):
    """An attribute a feature added later: left out of the IR's JSON while it holds its default, so a file
    that does not use the feature compiles to the IR it always did."""
    return field(default=default, metadata={"optional": True})


@dataclass(frozen=True)
class Ref:
    """A use of a name, located where it is used."""

    name: str
    span: Span = _span()


#: The output types by the name a file writes them with, each the OutputKind (nodes/outputs.py) that answers for its
#: values; filled there, one line per type. The parser and the YAML form take the names here beyond KEYWORD_TYPES,
#: the types they spell with keywords of their own (a choice's options, a list's item, a record's fields).
OUTPUT_TYPES: dict[str, Any] = {}
KEYWORD_TYPES = ("text", "number", "json", "choice", "list", "record")


def named_types() -> tuple[str, ...]:
    """The output types written by their name alone (`node a: NAME { }`): those beyond the keyword ones."""
    return tuple(name for name in OUTPUT_TYPES if name not in KEYWORD_TYPES)


@dataclass(frozen=True)
class OutputType:
    kind: str  # "text" | "number" | "json" | "choice" | "record" | "list"
    choices: tuple[str, ...] = ()
    fields: tuple[Field, ...] = optional(())  # of a record: `{verdict: choice(Yes, No), reason: text}`
    item: OutputType | None = optional(None)  # of a list: `list[text]`, a JSON array of them
    span: Span = _span()

    def __str__(self) -> str:
        if self.kind == "list":
            return f"list[{self.item}]"
        if self.kind == "record":
            return "{" + ", ".join(f"{f.name}: {f.type}" for f in self.fields) + "}"
        return f"choice({', '.join(self.choices)})" if self.kind == "choice" else self.kind

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)

    @property
    def free_text(self) -> bool:
        """Whether a value of it holds text of the model's own length, which a reply cut short cuts too."""
        return self.kind == "text" or any(f.type.free_text for f in self.fields)


@dataclass(frozen=True)
class Field:
    """One field of a record output, with a type of its own (never a record)."""

    name: str
    type: OutputType
    span: Span = _span()


@dataclass(frozen=True)
class Input:
    name: str
    type: OutputType
    field: str | None  # data field it reads, when named differently
    span: Span = _span()


@dataclass(frozen=True)
class Example:
    """One demonstration of a demos param: the values of its node's inputs and of its output, by name,
    in the order written."""

    fields: tuple[Setting, ...]
    span: Span = _span()


@dataclass(frozen=True)
class Param:
    """A prompt parameter: the text the optimizer rewrites, unless frozen. A demos param
    (`demos shots max 3 = [...]`) holds examples instead of text: the optimizer picks them from
    training samples the pipeline got right."""

    name: str
    text: str  # "" for a demos param
    frozen: bool
    demos: tuple[Example, ...] | None = optional(None)  # a demos param's examples; None: a text param
    max: Setting | None = optional(None)  # `max 3`: how many examples the optimizer may pick
    span: Span = _span()
    literal: Span = _span()  # exactly the string literal (a demos param: its list), for write-back

    @property
    def is_demos(self) -> bool:
        return self.demos is not None


@dataclass(frozen=True)
class Template:
    name: str
    text: str
    span: Span = _span()
    literal: Span = _span()


@dataclass(frozen=True)
class Function:
    """A Python callable the pipeline names, `function search = "tools:search"`: imported only at run time,
    and only from where the user allows (runtime/code.py)."""

    name: str
    target: str  # "module:name"
    settings: tuple[Setting, ...] = optional(())  # `{ description = lookup_doc  timeout = 5 }`: as a tool
    span: Span = _span()
    literal: Span = _span()

    def setting(self, key: str) -> Setting | None:
        return next((s for s in self.settings if s.key == key), None)


@dataclass(frozen=True)
class Setting:
    key: str
    value: Value
    span: Span = _span()  # the key
    value_span: Span = _span()


@dataclass(frozen=True)
class Each:
    """A map: `for each passage in passages` runs the node once per item of the list `over`, its templates
    seeing the item as `item`."""

    item: Ref
    over: Ref


@dataclass(frozen=True)
class Node:
    name: str
    type: OutputType  # of one run: a mapped node's value is a list of them
    settings: tuple[Setting, ...]
    each: Each | None = optional(None)
    span: Span = _span()

    def setting(self, key: str) -> Setting | None:
        for s in self.settings:  # a handful: a loop is faster than a dict or a generator
            if s.key == key:
                return s
        return None


@dataclass(frozen=True)
class Condition:
    """When a conditional edge feeds its targets: `when triage == "Yes"`, `when review.decision != send`.

    `subject` names a choice (a node's or an input's) or a record node, `field` the record's field."""

    subject: Ref
    field: Ref | None
    negated: bool  # `!=`
    option: str
    span: Span = _span()  # the option, as written

    def __str__(self) -> str:
        name = self.subject.name + (f".{self.field.name}" if self.field else "")
        return f"{name} {'!=' if self.negated else '=='} {self.option}"


@dataclass(frozen=True)
class Edge:
    """One step of an edge statement, `a, b -> c, d`: every source feeds every target.

    Kept as the product it describes: a statement of 1,500 x 1,500 names is 3,000 refs,
    where its pairs would be 2,250,000 objects.
    """

    sources: tuple[Ref, ...]
    targets: tuple[Ref, ...]
    condition: Condition | None = optional(None)  # a branch: the targets are fed only when it holds


@dataclass(frozen=True)
class Output:
    node: Ref
    field: str | None  # data field holding the expected answer
    record_field: Ref | None = optional(None)  # the field scored, of a record output: `output judge.verdict`
    alternatives: tuple[Ref, ...] = optional(())  # `output easy | hard`: the first of node and these that ran
    span: Span = _span()

    @property
    def candidates(self) -> tuple[Ref, ...]:
        """Every node that may give the output, in the order they are preferred."""
        return (self.node, *self.alternatives)


@dataclass(frozen=True)
class MetricDef:
    """A metric the file defines: an LLM judge (`metric quality { model = strong  prompt = rubric }`) or a
    Python function (`metric overlap = "metrics:overlap"`)."""

    name: str
    function: str | None  # "module:function" of a function metric; None for a judge
    settings: tuple[Setting, ...]  # a judge's
    span: Span = _span()
    value_span: Span | None = field(default=None, compare=False, repr=False)  # the function's string

    @property
    def kind(self) -> str:
        return "judge" if self.function is None else "function"

    def setting(self, key: str) -> Setting | None:
        return next((s for s in self.settings if s.key == key), None)


@dataclass(frozen=True)
class Block:
    """A settings block such as `model forward { ... }` or `optimize { ... }`."""

    kind: str
    name: str | None
    settings: tuple[Setting, ...]
    span: Span = _span()


@dataclass(frozen=True)
class Pipeline:
    name: str
    description: str
    inputs: tuple[Input, ...]
    params: tuple[Param, ...]
    templates: tuple[Template, ...]
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    outputs: tuple[Output, ...]
    metrics: tuple[Ref, ...]  # `metric NAME`: the metric scored, a built-in or one the file defines
    blocks: tuple[Block, ...]
    metric_defs: tuple[MetricDef, ...] = optional(())  # the metrics the file defines, in order
    functions: tuple[Function, ...] = optional(())
    span: Span = _span()
    path: str = field(default="", compare=False)
    text: str = field(default="", compare=False, repr=False)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)
