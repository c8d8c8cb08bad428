"""What an editor asks about a pipeline file, answered from the IR: where each name is declared and used,
what to show on hover, what to complete, the outline, a rename's edits, the formatted text.

`Document` reads one version of a file once: the diagnostics `sbpc check` gives, the IR of what parsed
(a file with a broken statement still has the rest), and every occurrence of every name. Names live in
namespaces: inputs and nodes share one ("node"), params, templates and model roles have their own. A
template's variables (`{{ statement }}`) are occurrences of the inputs and nodes they name, so a rename
reaches them. What hover shows is hover.py's, what to complete completion.py's. The language server
(cli/lsp.py) turns these answers into LSP messages; all offsets here are character offsets into the text.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property

from jinja2 import TemplateSyntaxError
from lark.exceptions import LarkError

from ...errors import SbpcError
from .. import ir
from ..check.checker import check
from ..check.context import IDENTIFIER, MODEL_ROLES, RESERVED, Analysis
from ..diagnostics import Diagnostic, PipelineError
from ..graph.compile import RouterCheck, diagnose
from ..nodes.templates import BUILTIN, ENV, TemplateProblem, variables
from ..syntax.tokens import Source, read
from .completion import REFERENCES, Completion, complete
from .fmt import format_text
from .hover import Hover, setting_hover

log = logging.getLogger(__name__)
Named = tuple[str, str, ir.Span | None, bool]  # namespace, name, where (None: nowhere in the text), declaration


class RenameError(SbpcError, ValueError):
    """A rename that cannot be done; the message says why."""


@dataclass(frozen=True)
class Occurrence:
    namespace: str  # node (inputs too), param, template, model, function
    name: str
    start: int
    end: int
    declaration: bool


@dataclass(frozen=True)
class Symbol:
    """An entry of the outline: a declaration, with the statement it heads."""

    name: str
    kind: str  # pipeline, input, param, template, function, node, output, metric, model, optimize
    detail: str
    start: int  # the whole statement (or the name alone, when the file does not parse)
    end: int
    name_start: int
    name_end: int
    children: tuple[Symbol, ...] = ()


@dataclass
class Document:
    text: str
    path: str
    router_problem: RouterCheck | None = None  # what `sbpc check` asks of a router file a model block names
    diagnostics: list[Diagnostic] = field(init=False)
    pipeline: ir.Pipeline | None = field(init=False)
    source: str = field(init=False)  # the text as spans count it (lone carriage returns made newlines)

    def __post_init__(self) -> None:
        self.diagnostics, source, self.pipeline = diagnose(self.text, self.path, self.router_problem)
        self.source = source if source is not None and len(source) == len(self.text) else self.text

    @property
    def sbp(self) -> bool:
        return self.path.endswith(".sbp")

    def answered(self) -> Document:
        """This reading with every answer an editor asks for made now (the index of names, the outline, the
        formatted text): a language server reads in a worker thread and answers on its loop at once."""
        _ = (self.occurrences, self.declarations, self.analysis, self.outline, self.formatted)  # cached once asked
        return self

    # -- what is where

    @cached_property
    def occurrences(self) -> list[Occurrence]:
        p = self.pipeline
        if p is None:
            return []
        named = [*self.declared_names(p), *self.used_names(p), *self.setting_names(p)]
        found = [
            Occurrence(namespace, name, span.start, span.end, declaration)
            for namespace, name, span, declaration in named
            if span is not None and span.end > span.start
        ]
        if self.sbp:
            for text, literal in self.jinja_sources():
                for namespace, name, start, end in self.template_names(text, literal):
                    found.append(Occurrence(namespace, name, start, end, False))
        return sorted(found, key=lambda o: o.start)

    def declared_names(self, p: ir.Pipeline) -> Iterator[Named]:
        """Every declaration, with the fields of a demos param's examples (its node's inputs and the node)."""
        for item in p.inputs:
            yield "node", item.name, item.span, True
        for node in p.nodes:
            yield "node", node.name, node.span, True
        for param in p.params:
            yield "param", param.name, param.span, True
            for example in param.demos or ():
                for shown in example.fields:
                    yield "node", shown.key, shown.span, False
        for template in p.templates:
            yield "template", template.name, template.span, True
        for function in p.functions:
            yield "function", function.name, function.span, True
        for block in p.blocks:
            if block.kind == "model":
                yield "model", block.name or "model", self.block_name(block), True
            elif block.kind == "mcp" and block.name:  # `mcp docs { }`: its tools are `docs.search`
                yield "mcp", block.name, self.block_name(block), True

    def used_names(self, p: ir.Pipeline) -> Iterator[Named]:
        """The inputs and nodes edges and outputs name."""
        for edge in p.edges:
            for ref in (*edge.sources, *edge.targets):
                yield "node", ref.name, ref.span, False
        for output in p.outputs:
            yield "node", output.node.name, output.node.span, False

    def setting_names(self, p: ir.Pipeline) -> Iterator[Named]:
        """The names settings hold: a node's prompt, template, model..., and a judge's param and model."""
        holders: list[ir.Node | ir.MetricDef] = [*p.nodes, *p.metric_defs]
        for holder in holders:
            for setting in holder.settings:
                spaces = REFERENCES.get(setting.key, ())
                if spaces and isinstance(setting.value, str) and IDENTIFIER.match(setting.value):
                    # `system` names a param when there is one of that name, else a template
                    namespace = "param" if "param" in spaces and p.param(setting.value) else spaces[-1]
                    yield namespace, setting.value, self.unquoted(setting.value_span, setting.value), False
                elif spaces and isinstance(setting.value, tuple):  # `tools = [lookup, calc]`: each a name
                    yield from self.listed(spaces[-1], setting.value, setting.value_span)
        for block in p.blocks:  # `search.description = search_doc` in an mcp block names a param
            for setting in block.settings if block.kind == "mcp" else ():
                if setting.key.endswith(".description") and isinstance(setting.value, str):
                    yield "param", setting.value, self.unquoted(setting.value_span, setting.value), False

    def listed(self, namespace: str, names: tuple[str, ...], span: ir.Span) -> Iterator[Named]:
        """The names a list setting holds, each where the text writes it (a name spelt otherwise: nowhere); of a
        server's tool, `docs.search`, the server's name."""
        written = self.source[span.start : span.end]
        for match in re.finditer(r"[A-Za-z_][\w.]*", written):
            if match.group() in names:
                start = span.start + match.start()
                server, dot, _ = match.group().partition(".")
                end = start + len(server) if dot else span.start + match.end()
                yield (
                    ("mcp" if dot else namespace),
                    server if dot else match.group(),
                    self.span_of(span, start, end),
                    False,
                )

    def span_of(self, within: ir.Span, start: int, end: int) -> ir.Span:
        """A span of the text from `start` to `end`, on a line of `within` (lines and columns counted from it)."""
        line = within.line + self.source.count("\n", within.start, start)
        column = start - (self.source.rfind("\n", 0, start) + 1) + 1
        return ir.Span(within.file, line, column, line, column + end - start, start, end)

    def block_name(self, block: ir.Block) -> ir.Span:
        """The role's name in `model forward {`, or the word `model` of an unnamed block."""
        if block.name and self.sbp:
            match = re.compile(r"\s*(\w+)").match(self.source, block.span.end)
            if match and match.group(1) == block.name:
                return ir.Span(block.span.file, 0, 0, 0, 0, match.start(1), match.end(1))
        return block.span

    def unquoted(self, span: ir.Span, value: str) -> ir.Span | None:
        """The name inside a value written as a string (`prompt = "p"`): just the name, or nothing when the
        literal spells it some other way."""
        written = self.source[span.start : span.end]
        if written == value:
            return span
        if written in (f'"{value}"', f"'{value}'"):
            return ir.Span(
                span.file, span.line, span.column + 1, span.end_line, span.end_column - 1, span.start + 1, span.end - 1
            )
        return None

    def jinja_sources(self) -> list[tuple[str, ir.Span]]:
        """Every text rendered as Jinja2 with a node's variables, with its literal: templates, inline
        templates, and params holding `{`."""
        p = self.pipeline
        assert p is not None
        sources = [(t.text, t.literal) for t in p.templates if t.name not in BUILTIN]
        sources += [(param.text, param.literal) for param in p.params if "{" in param.text]
        for node in p.nodes:
            setting = node.setting("template")
            if setting is not None and isinstance(setting.value, str) and not IDENTIFIER.match(setting.value):
                sources.append((setting.value, setting.value_span))
        return sources

    def template_names(self, text: str, literal: ir.Span) -> list[tuple[str, str, int, int]]:
        """The inputs, nodes and params a Jinja2 text reads (namespace, name, start, end), each where it is
        written in the file."""
        try:
            p = self.pipeline
            assert p is not None
            nodes = {i.name for i in p.inputs} | {n.name for n in p.nodes}
            params = {param.name for param in p.params} - nodes  # a name that is both is an error (E078)
            wanted = variables(text) & (nodes | params)
        except TemplateProblem:
            return []
        offsets = literal_offsets(self.source[literal.start : literal.end])
        if not wanted or offsets is None or len(offsets) != len(text):
            return []
        found, cursor, previous = [], 0, ""
        try:
            for _, kind, value in ENV.lexer.tokeniter(text, None):
                at = text.find(value, cursor)
                if at < 0:
                    break
                cursor = at + len(value)
                if kind == "name" and value in wanted and previous not in (".", "|", "is"):
                    start = literal.start + offsets[at]
                    found.append(("param" if value in params else "node", value, start, start + len(value)))
                if kind != "whitespace":
                    previous = value
        except TemplateSyntaxError:  # `variables` lexed this text already; had it refused, it is a diagnostic
            return found
        return found

    def declared(self, namespace: str, name: str | None = None) -> list[Occurrence]:
        return [o for o in self.declarations if o.namespace == namespace and (name is None or o.name == name)]

    @cached_property
    def declarations(self) -> list[Occurrence]:
        return [o for o in self.occurrences if o.declaration]

    def at(self, offset: int) -> Occurrence | None:
        """The name at an offset (the cursor just after a name counts as on it)."""
        for occurrence in self.occurrences:
            if occurrence.start <= offset <= occurrence.end:
                return occurrence
        return None

    def same(self, occurrence: Occurrence) -> list[Occurrence]:
        return [o for o in self.occurrences if (o.namespace, o.name) == (occurrence.namespace, occurrence.name)]

    # -- answers

    def definition(self, offset: int) -> list[Occurrence]:
        found = self.at(offset)
        return self.declared(found.namespace, found.name)[:1] if found else []

    def references(self, offset: int, include_declaration: bool = True) -> list[Occurrence]:
        found = self.at(offset)
        if found is None:
            return []
        return [o for o in self.same(found) if include_declaration or not o.declaration]

    def rename(self, offset: int, new: str) -> list[Occurrence]:
        """Every occurrence to write `new` over; RenameError when it cannot be done."""
        found = self.prepare_rename(offset)
        if not IDENTIFIER.match(new):
            raise RenameError(f"'{new}' is not a name: a letter or _, then letters, digits or _")
        if found.namespace == "node" and new in RESERVED:
            raise RenameError(f"'{new}' is a reserved word and cannot name an input or node")
        if new != found.name and self.declared(found.namespace, new):
            raise RenameError(f"'{new}' is declared already")
        return self.same(found)

    def prepare_rename(self, offset: int) -> Occurrence:
        if not self.sbp:
            raise RenameError("rename works in .sbp files")
        found = self.at(offset)
        if found is None:
            raise RenameError("no declared name here")
        if found.namespace == "model" and (found.name in MODEL_ROLES or found.name == "model"):
            raise RenameError("a role's model block is named by its role: forward, backward or optimizer")
        if not self.declared(found.namespace, found.name):
            raise RenameError(f"'{found.name}' is declared nowhere")
        return found

    def hover(self, offset: int) -> str | None:
        found = self.at(offset)
        if found is not None:
            return self.describe(found.namespace, found.name)
        return setting_hover(self.pipeline, offset)

    def describe(self, namespace: str, name: str) -> str | None:
        """What hover shows for a name, in Markdown (None: nothing declared by that name)."""
        return Hover(self.pipeline, self.analysis).describe(namespace, name) if self.pipeline is not None else None

    @cached_property
    def analysis(self) -> Analysis | None:
        """Predecessors and successors of what parsed (the checker's, its diagnostics set aside)."""
        if self.pipeline is None:
            return None
        try:
            return check(self.pipeline)[0]
        except Exception:  # any checker bug: logged, and hover goes without the edges rather than failing
            log.exception("the checker failed on what parsed of %s", self.path)
            return None

    # -- outline

    @cached_property
    def outline(self) -> list[Symbol]:
        p = self.pipeline
        if p is None:
            return []
        extents = self.extents()
        out: list[Symbol] = []

        def add(name: str, kind: str, detail: str, span: ir.Span, children: tuple[Symbol, ...] = ()) -> None:
            start, end = extents.get(span.start, (span.start, span.end))
            out.append(Symbol(name, kind, detail, start, end, span.start, span.end, children))

        add(p.name, "pipeline", p.description, p.span)
        for item in p.inputs:
            add(item.name, "input", str(item.type), item.span)
        for param in p.params:
            add(param.name, "param", "frozen" if param.frozen else "", param.span)
        for template in p.templates:
            add(template.name, "template", "", template.span)
        for function in p.functions:
            add(function.name, "function", function.target, function.span)
        for node in p.nodes:
            add(node.name, "node", str(node.type), node.span, self.settings_symbols(node.settings))
        for output in p.outputs:
            add(output.node.name, "output", "", output.span)
        for metric in p.metrics:
            add(metric.name, "metric", "", metric.span)
        for defined in p.metric_defs:
            add(defined.name, "metric", defined.function or "judge", defined.span)
        for block in p.blocks:
            label = f"{block.kind} {block.name}" if block.name else block.kind
            add(
                label,
                block.kind if block.kind in ("model", "optimize") else "block",
                "",
                block.span,
                self.settings_symbols(block.settings),
            )
        return sorted(out, key=lambda s: s.start)

    def settings_symbols(self, settings: tuple[ir.Setting, ...]) -> tuple[Symbol, ...]:
        return tuple(
            Symbol(s.key, "setting", str(s.value)[:40], s.span.start, s.value_span.end, s.span.start, s.span.end)
            for s in settings
        )

    def extents(self) -> dict[int, tuple[int, int]]:
        """Statement extents by the start of the names in them (a .sbp file that parses whole)."""
        if not self.sbp:
            return {}
        if self.syntax is None:  # a broken statement: the outline goes by names alone
            return {}
        return {token.start: (s.start, s.end) for s in self.syntax.statements for token in s.tokens}

    @cached_property
    def syntax(self) -> Source | None:
        """The statements and comments as written (None: a YAML file, or a broken statement), read once for the
        outline and the formatting."""
        if not self.sbp:
            return None
        try:
            return read(self.source)
        except LarkError:
            return None

    # -- completion

    def completions(self, offset: int) -> list[Completion]:
        if not self.sbp:
            return []  # YAML: its schema, in a YAML editor, completes keys
        return complete(self.source, offset, self.pipeline)

    # -- formatting

    @cached_property
    def formatted(self) -> str | None:
        """The text in the canonical layout (None: a YAML file, or one that does not parse)."""
        if not self.sbp:
            return None
        clean = self.pipeline is not None and not any(d.severity == "error" for d in self.diagnostics)
        try:  # a file that parsed whole is not parsed nor read again
            return format_text(self.text, self.path, self.pipeline if clean else None, self.syntax if clean else None)
        except (PipelineError, ValueError):
            return None


def literal_offsets(raw: str) -> list[int] | None:
    """For each character of the text a .sbp string literal holds, its offset in the literal (None for a
    literal it cannot map)."""
    if raw.startswith('"""') and raw.endswith('"""') and len(raw) >= 6:
        body = raw[3:-3]
        if not body.startswith(("\n", "\r\n")):
            return [3 + i for i in range(len(body))]
        lines, at = [], 3
        for line in body.split("\n"):
            lines.append((at, line.removesuffix("\r")))
            at += len(line) + 1
        indent = lines[-1][1]
        out: list[int] = []
        for index, (start, line) in enumerate(lines[1:-1]):
            if index:
                out.append(start - 1)  # the line break before this line
            if line.startswith(indent):
                out += range(start + len(indent), start + len(line))
        return out
    if raw.startswith('"') and raw.endswith('"') and len(raw) >= 2:
        out, i = [], 1
        while i < len(raw) - 1:
            out.append(i)
            if raw[i] != "\\":
                i += 1
            elif raw[i + 1] != "u":
                i += 2
            elif re.match(r"\\u[dD][89abAB]..\\u[dD][c-fC-F]", raw[i : i + 12]):
                i += 12  # a surrogate pair is one character
            else:
                i += 6
        return out
    return None
