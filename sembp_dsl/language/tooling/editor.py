"""What an editor asks about a pipeline file, answered from the IR: where each name is declared and used,
what to show on hover, what to complete, the outline, a rename's edits, the formatted text.

`Document` reads one version of a file once: the diagnostics `sbpc check` gives, the IR of what parsed
(a file with a broken statement still has the rest), and every occurrence of every name. Names live in
namespaces: inputs and nodes share one ("node"), params, templates and model roles have their own. A
template's variables (`{{ statement }}`) are occurrences of the inputs and nodes they name, so a rename
reaches them. The language server (cli/lsp.py) turns these answers into LSP messages; all offsets here
are character offsets into the text.
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
from ..blocks.method import SETTINGS as METHOD
from ..blocks.method import STRATEGIES
from ..check.checker import check
from ..check.context import IDENTIFIER, MODEL_ROLES, RESERVED, Analysis
from ..check.settings import BLOCKS, NODE_SETTINGS
from ..diagnostics import Diagnostic, PipelineError
from ..graph.compile import RouterCheck, diagnose
from ..graph.graph import model_specs
from ..kinds import KINDS, kind_of
from ..nodes import maps
from ..nodes.demos import limit
from ..nodes.metrics import JUDGE_SETTINGS, METRICS
from ..nodes.templates import BUILTIN, ENV, TemplateProblem, variables
from ..syntax.tokens import Source, read
from .fmt import format_text

# A node setting whose value names something declared elsewhere: the namespaces it may name.
REFERENCES = {
    "prompt": ("param",),
    "template": ("template",),
    "model": ("model",),
    "system": ("param", "template"),
    "function": ("function",),
    "demos": ("param",),
    "tools": ("function",),
}
KEYWORDS = (
    "input",
    "param",
    "frozen param",
    "demos",
    "frozen demos",
    "template",
    "function",
    "node",
    "output",
    "metric",
    "model",
    "optimize",
)
TYPES = ("text", "number", "json", "choice()")
SETTING_HELP = {  # every setting's words: each kind's own, a map's, a declaration's and a block's
    **{key: text for kind in KINDS.values() for key, text in kind.help.items()},
    **maps.HELP,
    "description": "a function's description as a tool: a param (trained, written back) or, by default, its docstring",
    "prompt": "the param rendered as `{{ prompt }}` in the node's template",
    "template": "a declared template, or inline Jinja2; default: the prompt, then one `Label: value` line per input",
    "parse": "`reply` (default): the whole reply; `tag`: the text inside <output>...</output>",
    "model": "the model the node's calls go to: a role, or a `model NAME { }` block (default: forward)",
    "system": "a param or template sent as the system message, rendered with the node's inputs",
    "demos": "a demos param: examples of this node's inputs and output, shown where its template names it",
    "name": "the model: any litellm model string, such as `openai/gpt-4o-mini`, or `embedded/smollm2-135m`",
    "temperature": "sampling temperature, 0 to 2 (default 0)",
    "top_p": "nucleus sampling, 0 to 1",
    "max_tokens": "reply length limit",
    "seed": "sampling seed",
    "api_base": "base URL of an OpenAI-compatible server",
    "api_key_env": "the environment variable holding this model's key",
    "timeout": "seconds a call may take (a model's request, or a function node's call)",
    "stop": "one stop sequence",
    "router": "a litellm Router config file, relative to the pipeline; `name` is one of its model groups",
    "concurrency": "calls of this model in flight at most",
    "rpm": "requests per minute, kept before sending",
    "tpm": "tokens per minute, kept before sending",
    "input_price": "dollars per million prompt tokens: the price sbpc charges and plans with (before litellm's)",
    "output_price": "dollars per million completion tokens: the price sbpc charges and plans with",
    "models": "the named models the optimizer may move a node to, e.g. [fast, strong] (a node's own list, or "
    "the optimize block's for every node)",
    **{name: setting.help for name, setting in METHOD.items()},
}


def setting_help(key: str) -> str | None:
    """A setting's words; the strategies' are read from STRATEGIES when asked, one line there adding one."""
    if key == "strategies":
        listed = "; ".join(f"{name}: {does}" for name, does in STRATEGIES.items())
        return f"the strategies a step may use (default: all). {listed}"
    return SETTING_HELP.get(key)


BLOCK_SETTINGS: dict[str, dict[str, tuple]] = {
    "node": NODE_SETTINGS,
    "metric": JUDGE_SETTINGS,
    **BLOCKS,
}
log = logging.getLogger(__name__)
Named = tuple[str, str, ir.Span | None, bool]  # namespace, name, where (None: nowhere in the text), declaration
CONTEXT_CHARS = 300  # of a line before the cursor, all completion looks at (a hostile line may be megabytes)


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


@dataclass(frozen=True)
class Completion:
    label: str
    kind: str  # keyword, param, template, node, input, setting, value, type, metric, variable
    detail: str = ""
    insert: str = ""  # text to insert, when not the label


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
        key = self.setting_at(offset)
        if key is not None:
            words = setting_help(key)
            return f"**{key}**: {words}" if words is not None else None
        return None

    def setting_at(self, offset: int) -> str | None:
        if self.pipeline is None:
            return None
        p = self.pipeline
        holders: list[ir.Node | ir.Block | ir.Function | ir.MetricDef] = [*p.nodes, *p.blocks, *p.functions]
        settings = [s for holder in (*holders, *p.metric_defs) for s in holder.settings]
        return next((s.key for s in settings if s.span.start <= offset <= s.span.end), None)

    def describe(self, namespace: str, name: str) -> str | None:
        """What hover shows for a name, in Markdown (None: nothing declared by that name)."""
        describers = {
            "param": self.describe_param,
            "template": self.describe_template,
            "function": self.describe_function,
            "node": self.describe_node,
            "model": self.describe_model,
            "mcp": self.describe_server,
        }
        describer = describers.get(namespace)
        return describer(name) if describer else None

    def users(self, key: str, name: str) -> str:
        """The nodes whose setting `key` names `name`, as hover lists them."""
        p = self.pipeline
        assert p is not None
        return ", ".join(n.name for n in p.nodes if (s := n.setting(key)) and s.value == name) or "no node"

    def describe_param(self, name: str) -> str | None:
        p = self.pipeline
        assert p is not None
        param = p.param(name)
        if param is None:
            return None
        if param.is_demos:
            return self.describe_demos(param)
        analysis = self.analysis
        users = [
            node
            for node, uses in (analysis.params.items() if analysis else ())
            if name in uses.instruction or name in uses.system
        ] or [n.name for n in p.nodes if (s := n.setting("prompt")) and s.value == name]
        head = f"{'frozen ' if param.frozen else ''}param **{name}**" + (
            " (never rewritten by the optimizer)" if param.frozen else " (the optimizer may rewrite it)"
        )
        return f"{head}\n\n```text\n{param.text}\n```\n\nused by: {', '.join(users) or 'no node'}"

    def describe_demos(self, param: ir.Param) -> str:
        head = f"{'frozen ' if param.frozen else ''}demos **{param.name}**" + (
            " (never changed by the optimizer)"
            if param.frozen
            else f" (the optimizer may pick up to {limit(param) or '?'} examples)"
        )
        return f"{head}: {len(param.demos or ())} examples\n\nused by: {self.users('demos', param.name)}"

    def describe_template(self, name: str) -> str | None:
        p = self.pipeline
        assert p is not None
        template = next((t for t in p.templates if t.name == name), None)
        if template is None:
            return None
        try:
            names = ", ".join(sorted(variables(template.text))) or "none"
        except TemplateProblem as exc:
            names = f"(does not compile: {exc.message})"
        users = [n.name for n in p.nodes for key in ("template", "system") if (s := n.setting(key)) and s.value == name]
        override = (
            f"\n\noverrides the built-in `{name}` template; it may use {', '.join(sorted(BUILTIN[name]))}"
            if name in BUILTIN
            else f"\n\nused by: {', '.join(users) or 'no node'}"
        )
        return f"template **{name}**\n\nvariables: {names}{override}"

    def describe_function(self, name: str) -> str | None:
        p = self.pipeline
        assert p is not None
        function = next((f for f in p.functions if f.name == name), None)
        if function is None:
            return None
        users = [n.name for n in p.nodes if name in kind_of(n).functions(n)]
        return (
            f"function **{name}**: `{function.target}`\n\nPython code, imported only when the pipeline runs (from "
            f"beside the pipeline, or a module allowed with --allow-module)\n\nused by: {', '.join(users) or 'no node'}"
        )

    def describe_server(self, name: str) -> str | None:
        p = self.pipeline
        assert p is not None
        block = next((b for b in p.blocks if b.kind == "mcp" and b.name == name), None)
        if block is None:
            return None
        where = next((f"`{s.value}`" for s in block.settings if s.key in ("command", "url")), "nowhere yet")
        users = [n.name for n in p.nodes if any(t.startswith(f"{name}.") for t in kind_of(n).functions(n))]
        return (
            f"MCP server **{name}**: {where}\n\nits tools are `{name}.TOOL`, their schemas from the lock "
            f"(`sbpc tools sync`)\n\nused by: {', '.join(users) or 'no node'}"
        )

    def describe_model(self, name: str) -> str:
        p = self.pipeline
        assert p is not None
        spec = model_specs(p)
        shown = [name] if name in spec else list(MODEL_ROLES)  # the unnamed block: every role
        lines = [f"- {r}: {spec[r].name or 'chosen at run time'}" for r in shown]
        if name not in MODEL_ROLES:
            lines.append(f"- used by: {self.users('model', name)}")
        return f"model **{name}**\n\n" + "\n".join(lines)

    def describe_node(self, name: str) -> str | None:
        """An input (its type, what it feeds) or a node (what it calls, its inputs, what it feeds)."""
        p = self.pipeline
        assert p is not None
        item = next((i for i in p.inputs if i.name == name), None)
        if item is not None:
            field_ = f", reads the field `{item.field}`" if item.field else ""
            return f"input **{name}**: {item.type}{field_}\n\nfeeds: {self.neighbours(name)[1] or 'no node'}"
        node = next((n for n in p.nodes if n.name == name), None)
        if node is None:
            return None
        inputs, feeds = self.neighbours(name)
        kind = kind_of(node)
        called = kind.functions(node)
        if not kind.prompted:
            facts = [
                f"calls the function {called[0] if called else '?'}, no model",
                f"inputs (its keyword arguments): {inputs or 'none'}",
            ]
        else:
            facts = self.model_node_facts(node, inputs) + (
                [f"may call the tools {', '.join(called)}"] if called else []
            )
        if feeds:
            facts.append(f"feeds: {feeds}")
        if kind.prompted and p.outputs and p.outputs[0].node.name == name:
            facts.append("the pipeline's output")
        return f"node **{name}**: {node.type}\n\n" + "\n".join(f"- {fact}" for fact in facts)

    def neighbours(self, name: str) -> tuple[str, str]:
        """The inputs and nodes a name reads from, and the nodes it feeds, as hover lists them ("": unknown)."""
        analysis = self.analysis
        if analysis is None:
            return "", ""
        return ", ".join(analysis.predecessors.get(name, ())), ", ".join(analysis.successors.get(name, ()))

    def model_node_facts(self, node: ir.Node, inputs: str) -> list[str]:
        """A model node's model, inputs, and the settings that shape its prompt and reply."""
        p = self.pipeline
        assert p is not None
        own = node.setting("model")
        role = str(own.value) if own is not None else "forward"
        spec = model_specs(p).get(role)
        model = (spec.name if spec else None) or "chosen at run time (--model, or the embedded model)"
        facts = [f"model: {model if role == 'forward' else f'{role} ({model})'}", f"inputs: {inputs or 'none'}"]
        for key in ("prompt", "template", "system", "parse"):
            setting = node.setting(key)
            if setting is not None:
                value = str(setting.value)
                facts.append(f"{key}: {value if IDENTIFIER.match(value) else 'inline'}")
        return facts

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
        context = scan(self.source, offset)
        line_start = max(self.source.rfind("\n", 0, offset) + 1, offset - CONTEXT_CHARS)
        line = self.source[line_start:offset]  # what completion needs of a line is its end
        names = self.names_by_namespace()
        if context.in_string:
            return self.jinja_completions(names) if context.in_jinja else []
        if context.block == "record":  # `node judge: {verdict: |`: a field's type
            return [Completion(t, "type", insert=t) for t in TYPES] if re.search(r":\s*\w*$", line) else []
        if context.block is not None:
            return self.setting_completions(context.block, line, names)
        return self.statement_completions(line, names)

    def jinja_completions(self, names: dict[str, list[tuple[str, str]]]) -> list[Completion]:
        """Inside `{{` of a string: the variables a node's template may read."""
        nodes = [Completion(n, k) for n, k in names["node"]]
        params = [Completion(n, k) for n, k in names["param"]]
        return nodes + params + [Completion("prompt", "variable", "the node's prompt param")]

    def setting_completions(self, block: str, line: str, names: dict[str, list[tuple[str, str]]]) -> list[Completion]:
        """In a settings block: a setting's name, or after `key =` the names or words it accepts."""
        settings = BLOCK_SETTINGS.get(block, {})
        value = re.search(r"(\w+)\s*=\s*\w*$", line)
        if value:
            key = value.group(1)
            if block in ("node", "metric") and key in REFERENCES:
                return [Completion(n, kind) for space in REFERENCES[key] for n, kind in names[space]]
            accepted = settings.get(key, ())
            if accepted and isinstance(accepted[0], str):
                return [Completion(word, "value") for word in accepted]
            return []
        if re.search(r"(^|[\s{;])\w*$", line):
            return [Completion(key, "setting", setting_help(key) or "", f"{key} = ") for key in settings]
        return []

    def statement_completions(self, line: str, names: dict[str, list[tuple[str, str]]]) -> list[Completion]:
        """Outside any block: a keyword, a node an edge names, what `output`, `metric` or `model` names, a type."""
        if re.fullmatch(r"\s*\w*", line):  # a statement starts: a keyword, or the name an edge starts with
            return [Completion(k, "keyword") for k in KEYWORDS] + [Completion(n, kind) for n, kind in names["node"]]
        declaration = re.match(r"\s*(node|input|param|demos|frozen|template|function|pipeline)\b", line)
        if re.search(r"(->|,)\s*\w*$", line) and not declaration:
            return [Completion(n, kind) for n, kind in names["node"]]
        if re.match(r"\s*output\s+\w*$", line):
            return [Completion(n, kind) for n, kind in names["node"] if kind == "node"]
        if re.match(r"\s*metric\s+\w*$", line):
            defined = [d.name for d in self.pipeline.metric_defs] if self.pipeline else []
            return [Completion(m, "metric") for m in (*METRICS, *defined)]
        if re.match(r"\s*model\s+\w*$", line):
            return [Completion(role, "model") for role in MODEL_ROLES]
        if re.match(r"\s*(node\s+\w+|input\s+[\w,\s]+):\s*\w*$", line):
            return [Completion(t, "type", insert=t) for t in TYPES]
        return []

    def names_by_namespace(self) -> dict[str, list[tuple[str, str]]]:
        p = self.pipeline
        names: dict[str, list[tuple[str, str]]] = {
            "node": [],
            "param": [],
            "template": [],
            "model": [],
            "function": [],
            "mcp": [],
        }
        if p is None:
            return names
        names["node"] = [(i.name, "input") for i in p.inputs] + [(n.name, "node") for n in p.nodes]
        names["param"] = [(x.name, "param") for x in p.params]
        names["template"] = [(t.name, "template") for t in p.templates if t.name not in BUILTIN]
        names["function"] = [(f.name, "function") for f in p.functions]
        names["mcp"] = [(b.name, "MCP server") for b in p.blocks if b.kind == "mcp" and b.name]
        named = [b.name for b in p.blocks if b.kind == "model" and b.name and b.name not in MODEL_ROLES]
        names["model"] = [(r, "model") for r in dict.fromkeys([*MODEL_ROLES, *named])]
        return names

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


@dataclass(frozen=True)
class Context:
    """Where a cursor is: in which settings block (node, model, optimize), inside a string, inside `{{`."""

    block: str | None
    in_string: bool
    in_jinja: bool


_LEXEME = re.compile(r'"""|"(?:[^"\\\n]|\\.)*(?:"|$)|#[^\n]*|[{}]', re.M)


def scan(text: str, offset: int) -> Context:
    """Read up to the cursor as the lexer would, tolerating a file that is being typed."""
    stack: list[str] = []
    position = 0
    while True:
        match = _LEXEME.search(text, position, offset)
        if match is None:
            return Context(stack[-1] if stack else None, False, False)
        lexeme = match.group()
        if lexeme == '"""':
            close = text.find('"""', match.end(), offset)
            if close < 0:  # the cursor is inside this block string
                body = text[match.end() : offset]
                return Context(stack[-1] if stack else None, True, body.rfind("{{") > body.rfind("}}"))
            position = close + 3
            continue
        if lexeme.startswith('"'):
            if match.end() == offset and (len(lexeme) == 1 or not lexeme.endswith('"')):
                body = lexeme[1:]
                return Context(stack[-1] if stack else None, True, body.rfind("{{") > body.rfind("}}"))
        elif lexeme == "{":
            line_start = max(text.rfind("\n", 0, match.start()) + 1, match.start() - CONTEXT_CHARS)
            before = text[line_start : match.start()]
            head = before.split()
            if before.rstrip().endswith(":"):  # `node judge: {`: a record type, not the settings
                stack.append("record")
            else:
                stack.append("node" if head[:1] == ["node"] else head[0] if head else "")
        elif lexeme == "}" and stack:
            stack.pop()
        position = match.end()


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
