"""The typed IR: what a pipeline *is*, whichever syntax (.sbp or YAML) it was written in.

Every element keeps the span of the text it came from. Spans never take part in
equality, so the same pipeline written in both syntaxes compares equal.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

Value = str | int | float | bool


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


@dataclass(frozen=True)
class Ref:
    """A use of a name, located where it is used."""

    name: str
    span: Span = _span()


@dataclass(frozen=True)
class OutputType:
    kind: str  # "text" | "number" | "json" | "choice"
    choices: tuple[str, ...] = ()
    span: Span = _span()

    def __str__(self) -> str:
        return f"choice({', '.join(self.choices)})" if self.kind == "choice" else self.kind


@dataclass(frozen=True)
class Input:
    name: str
    type: OutputType
    field: str | None  # data field it reads, when named differently
    span: Span = _span()


@dataclass(frozen=True)
class Param:
    """A prompt parameter: the text the optimizer rewrites, unless frozen."""

    name: str
    text: str
    frozen: bool
    span: Span = _span()
    literal: Span = _span()  # exactly the string literal, for write-back


@dataclass(frozen=True)
class Template:
    name: str
    text: str
    span: Span = _span()
    literal: Span = _span()


@dataclass(frozen=True)
class Setting:
    key: str
    value: Value
    span: Span = _span()  # the key
    value_span: Span = _span()


@dataclass(frozen=True)
class Node:
    name: str
    type: OutputType
    settings: tuple[Setting, ...]
    span: Span = _span()

    def setting(self, key: str) -> Setting | None:
        return next((s for s in self.settings if s.key == key), None)


@dataclass(frozen=True)
class Edge:
    """One step of an edge statement, `a, b -> c, d`: every source feeds every target.

    Kept as the product it describes: a statement of 1,500 x 1,500 names is 3,000 refs,
    where its pairs would be 2,250,000 objects.
    """

    sources: tuple[Ref, ...]
    targets: tuple[Ref, ...]


@dataclass(frozen=True)
class Output:
    node: Ref
    field: str | None  # data field holding the expected answer
    span: Span = _span()


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
    metrics: tuple[Ref, ...]
    blocks: tuple[Block, ...]
    span: Span = _span()
    path: str = field(default="", compare=False)
    text: str = field(default="", compare=False, repr=False)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)
