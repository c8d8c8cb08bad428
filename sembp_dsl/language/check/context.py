"""What every pass of the checker shares: the `Context` it reads and reports through, the names the language
reserves, and the `Analysis` the compiler builds on."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from .. import ir, mcp_servers
from ..diagnostics import Diagnostic, Note, diagnostic, point, suggestion
from ..kinds.agent.toolbox import declared_tools
from ..nodes.outputs import field_of, fields_of
from ..nodes.templates import MAX_SECONDS

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
RESERVED = {
    "pipeline",
    "input",
    "param",
    "demos",
    "frozen",
    "template",
    "function",
    "node",
    "output",
    "metric",
    "from",
    "prompt",
    "inputs",
}
MODEL_ROLES = ("forward", "backward", "optimizer")


class NodeParams(NamedTuple):
    """The params a node uses, in the order it names them: those its instruction is made of (its `prompt`,
    then those its template names) and those its system message names."""

    instruction: tuple[str, ...]
    system: tuple[str, ...]


@dataclass(frozen=True)
class Analysis:
    predecessors: dict[str, tuple[str, ...]]  # node -> inputs and nodes feeding it, in edge order
    successors: dict[str, tuple[str, ...]]
    order: tuple[str, ...]  # nodes, topologically sorted
    metric: str
    params: dict[str, NodeParams]  # node -> the params it uses
    demos: dict[str, str]  # node -> its demos param (`demos = shots`)


def output_type(node: ir.Node | None, output: ir.Output | None) -> ir.OutputType | None:
    """The type of what is scored: the output node's, or that of its field (`output judge.verdict`)."""
    if node is None or output is None or output.record_field is None:
        return node.type if node is not None else None
    found = field_of(node.type, output.record_field.name)
    return found.type if found is not None else None


class Context:
    """What the rules share: the pipeline, the diagnostics so far, and the names declared in it."""

    def __init__(self, pipeline: ir.Pipeline):
        self.p = pipeline
        self.diagnostics: list[Diagnostic] = []
        self.received_sets: dict[tuple[int, bool], frozenset[str]] = {}
        self.tainted: set[str] = set()  # nodes whose other errors would only repeat an error already reported
        self.nodes = self.unique("node or input", [*pipeline.inputs, *pipeline.nodes])
        self.node_names = {n.name for n in pipeline.nodes}
        self.params = self.unique("param", pipeline.params)
        self.templates = self.unique("template", pipeline.templates)
        self.functions = self.unique("function", pipeline.functions)
        self.servers = self.unique("mcp server", [b for b in pipeline.blocks if b.kind == mcp_servers.KIND and b.name])
        self.tools = {**declared_tools(pipeline), **self.functions}  # a node's tools: functions, servers' tools
        self.models = dict.fromkeys([*MODEL_ROLES, *(b.name for b in pipeline.blocks if b.kind == "model" and b.name)])
        self.records = {n.name: tuple(f.name for f in fields) for n in pipeline.nodes if (fields := fields_of(n.type))}
        self.metric_defs = self.unique("metric", pipeline.metric_defs)
        self.node_params: dict[str, NodeParams] = {}
        self.demos: dict[str, str] = {}  # node -> the demos param it declares (`demos = shots`), when it is one
        # the seconds left for trial renders: one render's limit for the whole check, not one per template
        self.render_seconds = MAX_SECONDS
        self.untried = False  # a template was left untried once they were spent (said once)
        self.rendered: dict[tuple, tuple] = {}  # what a trial render found, by what it was given
        # what the passes found that later ones build on (checker.PASSES says which pass finds each)
        self.predecessors: dict[str, tuple[str, ...]] = {}  # node -> inputs and nodes feeding it, in edge order
        self.successors: dict[str, tuple[str, ...]] = {}
        self.statements: list = []  # the edge statements once checked (edges.Statement)
        self.order: tuple[str, ...] = ()  # nodes, topologically sorted
        self.output: ir.Node | None = None  # the output node, when there is one
        self.label = ""  # how messages name the output (`judge.verdict` for a record's field)
        self.metric = ""  # the metric scored

    def report(self, code: str, span: ir.Span | None, message: str, help: str = "", notes=()) -> None:
        self.diagnostics.append(diagnostic(code, span, message, file=self.p.path, help=help, notes=notes))

    def unique(self, what: str, items) -> dict:
        seen: dict = {}
        for item in items:
            if item.name in seen:
                first = seen[item.name].span
                self.report("E020", item.span, f"duplicate {what} '{item.name}'", notes=[first_here(first)])
            else:
                seen[item.name] = item
        return seen

    def locate(self, literal: ir.Span, name: str | None, line: int | None = None) -> ir.Span:
        """Point inside a template literal: at a variable's first use, or at a line of it."""
        text = self.p.text
        if not text or literal is None:
            return literal
        body = text[literal.start : literal.end]
        if name is not None:
            match = re.search(r"(?:\{\{|\{%)[^}]*?\b(" + re.escape(name) + r")\b", body)
            offset = literal.start + match.start(1) if match else None
        else:
            lines = body.split("\n")
            skip = 1 if body.startswith(('"""\n', '"""\r\n', "|", ">")) else 0
            index = min((line or 1) - 1 + skip, len(lines) - 1)
            offset = literal.start + sum(len(x) + 1 for x in lines[:index])
            offset += len(lines[index]) - len(lines[index].lstrip())
            name = lines[index].strip() or " "
        if offset is None:
            return literal
        return point(literal.file, text, offset, len(name))

    def name_in(self, listed: ir.Span, name: str) -> ir.Span:
        """Point at a name inside a list (`[fast, strnog]`), or at the list when the text is not at hand."""
        text = self.p.text
        if not text or listed is None:
            return listed
        match = re.search(r"(?<![\w-])" + re.escape(name) + r"(?![\w-])", text[listed.start : listed.end])
        return point(listed.file, text, listed.start + match.start(), len(name)) if match else listed


def first_here(span: ir.Span) -> Note:
    return Note(span, "first declared here")


def no_field(cx: Context, span: ir.Span, node: str, field: str) -> None:
    fields = cx.records[node]
    help = suggestion(field, fields) or f"its fields are {', '.join(fields)}"
    cx.report("E076", span, f"node '{node}' has no field '{field}'", help=help)
