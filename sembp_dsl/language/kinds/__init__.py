"""The kinds of node, one module each, and the registry that says which kind a node is.

A kind (kind.py's NodeKind) answers everything the compiler asks of a node: its settings and checks, how it
runs forward, what backward is shown of it, what it costs in the plan, how it is emitted. The checker, the
graph, the runtime and the optimizer ask `kind_of(node)`, never which kind it is. Adding a kind is a module
here and one line in KINDS (and its syntax: a setting that marks it is syntax enough); the codes its checks
report are its own (`codes`), which the registry of codes finds here. What a kind keeps on its
traces is shown through `shown` here, which asks the kind that keeps it, so no display knows any kind's data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .. import codes, ir
from ..nodes.node import GraphNode
from ..nodes.trace import Shown
from .agent import ToolLoop
from .agent.toolcalls import bounded
from .function import FunctionCall
from .kind import NodeKind
from .model import ModelCall

SHOWN_JSON = 2000  # the most characters of a kind's data `sbpc show` and the report give as JSON (run --trace: all)
DEFAULT = ModelCall.name  # the kind of a node that has no kind's marker setting
KINDS: dict[str, NodeKind] = {  # one line per kind, by name; a node is of the first whose marker it has
    ModelCall.name: ModelCall(),
    FunctionCall.name: FunctionCall(),
    ToolLoop.name: ToolLoop(),
}
codes.declared_by(lambda: [code for kind in KINDS.values() for code in kind.codes])


def kind_of(node: ir.Node | GraphNode) -> NodeKind:
    """The kind of a node of the IR (by the marker setting it has) or of the graph (by name)."""
    if isinstance(node, GraphNode):
        return KINDS[node.kind]
    for kind in KINDS.values():
        if kind.marker is not None and node.setting(kind.marker) is not None:
            return kind
    return KINDS[DEFAULT]


def taken(key: str) -> bool:
    """Whether some kind of node takes the setting `key` (a node of another kind refuses it, saying why)."""
    return any(key in kind.accepts for kind in KINDS.values())


def shown(extra: Mapping[str, Any], full: bool = False) -> list[Shown]:
    """A node's kind's own trace data (NodeTrace.extra, or a recorded node's: trace.extra_of) as people are shown
    it, each part by the kind whose `trace_keys` hold it; data no kind here keeps (a record written with a kind
    this sbpc lacks) shown as its JSON, under its key."""
    parts: list[Shown] = []
    left = dict(extra)
    for kind in KINDS.values():
        own = {key: left.pop(key) for key in kind.trace_keys if key in left}
        if not own:
            continue
        try:
            parts += kind.shown(own, full)
        except (TypeError, ValueError, AttributeError, KeyError):  # a record's data in a form the kind cannot read
            parts += as_json(own, full)
    return parts + as_json(left, full)


def as_json(data: Mapping[str, Any], full: bool = False) -> list[Shown]:
    """Trace data no kind can say in words: each key's value as JSON, under the key; in the short form cut to
    SHOWN_JSON characters, saying how many more (a stranger's record may hold megabytes under one key)."""
    texts = {key: json.dumps(value, ensure_ascii=False, indent=2, default=str) for key, value in data.items()}
    return [Shown(key, text if full else bounded(text, SHOWN_JSON)) for key, text in texts.items()]
