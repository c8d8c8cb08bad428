"""Maps: a node that runs once per item of a list (`node note: text for each passage in passages { ... }`).

A map is not a kind of node: any kind runs once per item (runtime/forward.py wraps it), its templates seeing the
item by its name, and the node's value is the JSON array of its runs' values, a `list[T]` of its declared type.
`max_items` bounds the runs of one sample: the plan counts that many, and items past it are not run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from .. import ir
from ..diagnostics import Note, suggestion
from .outputs import item_of

SETTINGS: Mapping[str, tuple] = {"max_items": (int,)}  # what a mapped node takes beyond its kind's settings
HELP = {"max_items": "the most items of the list one sample runs (required: the plan counts them); past it, not run"}
MAX_ITEMS = 100_000


@dataclass(frozen=True)
class Each:
    """A node's map, compiled: the item's name, the list it is drawn from, and the most items run."""

    item: str
    over: str
    max_items: int


def each_of(node: ir.Node) -> Each | None:
    if node.each is None:
        return None
    most = node.setting("max_items")
    return Each(
        node.each.item.name,
        node.each.over.name,
        int(most.value) if most is not None and isinstance(most.value, (int, float)) else MAX_ITEMS,
    )


def value_type(node: ir.Node) -> ir.OutputType:
    """What a node's value is: its type, or the list of it when the node is mapped."""
    return ir.OutputType("list", item=node.type, span=node.type.span) if node.each is not None else node.type


def items(value: str) -> list[str] | None:
    """A list's items as their successors see them (a string as itself, anything else as JSON); None when the
    value is not a JSON array."""
    try:
        read = json.loads(value)
    except (ValueError, TypeError):
        return None
    if not isinstance(read, list):
        return None
    return [item if isinstance(item, str) else json.dumps(item, ensure_ascii=False) for item in read]


class Checking(Protocol):
    """What these checks read and report through: the checker's Context."""

    @property
    def nodes(self) -> Mapping[str, ir.Input | ir.Node]: ...

    def report(
        self, code: str, span: ir.Span | None, message: str, help: str = "", notes: Sequence[Note] = ()
    ) -> None: ...


def check_map(cx: Checking, node: ir.Node, received: tuple[str, ...]) -> None:
    """A mapped node bounds its items (E126) and maps over a list (E125) that feeds it (E127)."""
    each = node.each
    if each is None:
        return
    if node.setting("max_items") is None:
        cx.report(
            "E126",
            each.item.span,
            f"node '{node.name}' maps over '{each.over.name}' without `max_items`",
            help="add `max_items = 8` (the most items one sample runs; the plan counts them)",
        )
    over = cx.nodes.get(each.over.name)
    if over is None:  # an edge from it would not be checked either: a run met a KeyError
        cx.report(
            "E024",
            each.over.span,
            f"node '{node.name}' maps over '{each.over.name}', which is no input and no node",
            help=suggestion(each.over.name, cx.nodes),
        )
        return
    if each.over.name not in received:
        cx.report(
            "E127",
            each.over.span,
            f"node '{node.name}' maps over '{each.over.name}', which does not feed it",
            help=f"add `{each.over.name} -> {node.name}`",
        )
    type_ = value_type(over) if isinstance(over, ir.Node) else over.type
    if item_of(type_) is None:
        cx.report(
            "E125",
            each.over.span,
            f"'{each.over.name}' is {type_}, not a list: a map runs once per item of a list",
            help=f"declare it `list[{type_}]` (a JSON array), or drop `for each` to run once",
        )
