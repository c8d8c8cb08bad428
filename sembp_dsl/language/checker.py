"""IR -> checked IR: every semantic rule of the language, every violation reported at once.

One function per rule, all reading and reporting through a `Context`; `check` runs them in order.

The result, `Analysis`, is what the compiler builds on: predecessors in declaration
order (which fixes hint numbering), successors and a topological order.
"""

from __future__ import annotations

import difflib
import os
import re
import time
from collections import deque
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass
from typing import NamedTuple

from . import ir, maps, mcp_servers
from .branches import check_conditions, check_output_alternatives, check_paths
from .callables import Target, beside, parse_target
from .data import DATA_SETTINGS, SIZE_OR_FILE, check_data_blocks
from .demos import limit
from .diagnostics import Diagnostic, Note, diagnostic, point, suggestion, suggestion_or_list, url_problem
from .kinds import KINDS, kind_of, taken
from .kinds.agent.toolbox import declared_tools
from .method import SETTINGS, STRATEGIES, within
from .metrics import JUDGE_SETTINGS, METRICS, parse_scale
from .providers import PROVIDERS, no_provider, provider_of
from .signatures import defined_async
from .templates import (
    BUILTIN,
    DEFAULT_TEMPLATE,
    MAX_OUTPUT_CHARS,
    MAX_SECONDS,
    RenderError,
    TemplateProblem,
    reads,
    trial_render,
    variables,
)

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

# Allowed settings: key -> accepted Python types, or the tuple of allowed names.
NUMBER = (int, float)
NODE_SETTINGS = {key: accepted for kind in KINDS.values() for key, accepted in kind.accepts.items()}  # any kind's
MODEL_SETTINGS = {
    "name": (str,),
    "temperature": NUMBER,
    "top_p": NUMBER,
    "max_tokens": (int,),
    "seed": (int,),
    "api_base": (str,),
    "api_key_env": (str,),
    "timeout": NUMBER,
    "stop": (str,),
    "router": (str,),
    "concurrency": (int,),
    "rpm": (int,),
    "tpm": (int,),
    "constrain": ("auto", "off", "schema"),
    "input_price": NUMBER,  # dollars per million prompt tokens (prices.DECLARED)
    "output_price": NUMBER,  # dollars per million completion tokens
}
OPTIMIZE_SETTINGS: dict[str, tuple] = {
    name: s.words or ((int, float) if s.kind is float else (int,)) for name, s in SETTINGS.items()
}
OPTIMIZE_SETTINGS["models"] = (tuple,)  # the named models nodes may move to: `models = [fast, strong]`
OPTIMIZE_SETTINGS["strategies"] = (tuple,)  # the strategies a step may use: `strategies = [gradients, models]`
PRICES = ("input_price", "output_price")
# What a `function` declaration's block takes: how a model is told of it as a tool (a param), and how long a call
# of it may take.
FUNCTION_SETTINGS: dict[str, tuple] = {"description": (str,), "timeout": (int, float)}
BLOCKS: dict[str, dict[str, tuple]] = {
    "model": MODEL_SETTINGS,
    "optimize": OPTIMIZE_SETTINGS,
    "data": DATA_SETTINGS,
    mcp_servers.KIND: mcp_servers.SERVER_SETTINGS,
}
# Number settings: (smallest, largest, smallest excluded). Beyond these a run would surely fail or never end.
BOUNDS = {
    "temperature": (0, 2, False),
    "top_p": (0, 1, False),
    "max_tokens": (1, 10_000_000, False),
    "seed": (-(2**63), 2**63 - 1, False),
    "timeout": (0, 86_400, True),  # a model's, or a function node's
    "concurrency": (1, 100_000, False),
    "rpm": (1, 10_000_000_000, False),
    "tpm": (1, 10_000_000_000, False),
    **{price: (0, 1_000_000, False) for price in PRICES},  # dollars per million tokens
    "train": (0, 10_000_000, False),  # a data block's sizes
    "validation": (0, 10_000_000, False),
    "test": (0, 10_000_000, False),
    "max_items": (1, maps.MAX_ITEMS, False),
    **{name: (s.low, s.high, s.low_excluded) for name, s in SETTINGS.items() if not s.choices},
}
SPELLINGS = {word for s in SETTINGS.values() for word in s.spellings}  # taken, but not listed as choices
MAX_CYCLES_REPORTED = 20
SCALAR_KINDS = ("text", "choice", "number")  # a value a template reads as one string, with no fields
MAX_EDGES = 10_000_000  # pairs, however they are written; a 1,500 x 1,500 statement is 2,250,000


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


def template_source(pipeline: ir.Pipeline, node: ir.Node) -> str:
    """The Jinja2 source a node renders: a named template, an inline one, or the default (which shows the
    node's demos, when it has any, between its prompt and its inputs)."""
    setting = node.setting("template")
    if setting is None:
        demos = node.setting("demos")
        if demos is None or not isinstance(demos.value, str) or not IDENTIFIER.match(demos.value):
            return DEFAULT_TEMPLATE
        shots = demos.value
        shown = f"{{{{ prompt }}}}{{% if {shots} %}}\n\n{{{{ {shots} }}}}{{% endif %}}"
        return DEFAULT_TEMPLATE.replace("{{ prompt }}", shown, 1)
    named = {t.name: t.text for t in pipeline.templates}
    return named.get(str(setting.value), str(setting.value))


def system_source(pipeline: ir.Pipeline, node: ir.Node) -> str | None:
    """The Jinja2 source of a node's system message: `{{ NAME }}` for a param, a named template, an inline
    one; None without `system`."""
    setting = node.setting("system")
    if setting is None:
        return None
    value = str(setting.value)
    if pipeline.param(value) is not None:
        return "{{ " + value + " }}"
    return next((t.text for t in pipeline.templates if t.name == value), value)


def output_type(node: ir.Node | None, output: ir.Output | None) -> ir.OutputType | None:
    """The type of what is scored: the output node's, or that of its field (`output judge.verdict`)."""
    if node is None or output is None or output.record_field is None:
        return node.type if node is not None else None
    found = node.type.field(output.record_field.name)
    return found.type if found is not None else None


def default_metric(output_type: ir.OutputType | None) -> str:
    kind = output_type.kind if output_type is not None else "text"
    return {"number": "numeric", "json": "json", "record": "json"}.get(kind, "exact")


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
        self.records = {n.name: tuple(f.name for f in n.type.fields) for n in pipeline.nodes if n.type.kind == "record"}
        self.metric_defs = self.unique("metric", pipeline.metric_defs)
        self.node_params: dict[str, NodeParams] = {}
        self.demos: dict[str, str] = {}  # node -> the demos param it declares (`demos = shots`), when it is one
        # the seconds left for trial renders: one render's limit for the whole check, not one per template
        self.render_seconds = MAX_SECONDS
        self.untried = False  # a template was left untried once they were spent (said once)
        self.rendered: dict[tuple, tuple] = {}  # what a trial render found, by what it was given

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


def check_reserved(cx: Context) -> None:
    items: list[ir.Input | ir.Node] = [*cx.p.inputs, *cx.p.nodes]
    for item in items:
        if item.name in RESERVED:
            cx.report("E021", item.span, f"'{item.name}' is a reserved word and cannot name an input or node")


def check_settings(cx: Context, where: str, settings, allowed: Mapping[str, tuple]) -> None:
    seen: dict[str, ir.Setting] = {}
    for s in settings:
        if s.key in seen:
            cx.report("E031", s.span, f"duplicate setting '{s.key}' in {where}", notes=[first_here(seen[s.key].span)])
        seen.setdefault(s.key, s)
        accepted = allowed.get(s.key)
        if accepted is None:
            cx.report("E030", s.span, f"unknown setting '{s.key}' in {where}", help=suggestion_or_list(s.key, allowed))
        elif isinstance(accepted[0], str):
            if s.value not in accepted:
                listed = [word for word in accepted if word not in SPELLINGS]
                cx.report(
                    "E032",
                    s.value_span,
                    f"'{s.key}' must be one of {', '.join(listed)}, not {s.value!r}",
                    help=suggestion(str(s.value), listed),
                )
        elif isinstance(s.value, bool) or not isinstance(s.value, accepted):
            words = {str: "a string", int: "an integer", float: "a number", tuple: "a list of names"}
            kind = "a size (an integer) or a file (a string)" if accepted == SIZE_OR_FILE else words[accepted[-1]]
            cx.report("E033", s.value_span, f"'{s.key}' must be {kind}, not {s.value!r}")
        elif s.key in BOUNDS:
            check_bounds(cx, s)


def check_bounds(cx: Context, s: ir.Setting) -> None:
    low, high, exclusive = BOUNDS[s.key]
    if isinstance(s.value, (int, float)) and not within(s.value, low, high, exclusive):
        low_text = f"more than {low}" if exclusive else f"at least {low}"
        cx.report("E034", s.value_span, f"'{s.key}' must be {low_text} and at most {high:,}, not {s.value!r}")


def check_node(cx: Context, node: ir.Node) -> None:
    """A node's settings, as its kind takes them (one another kind takes is refused, its kind saying why), the
    rules of a prompt when its kind renders one, its kind's own rules, and its type."""
    kind = kind_of(node)
    accepts = {**kind.accepts, **maps.SETTINGS} if node.each is not None else kind.accepts
    for s in node.settings:
        if s.key not in accepts and taken(s.key):
            kind.refuse(cx, node, s)
    own = [s for s in node.settings if s.key in accepts or not taken(s.key)]
    check_settings(cx, f"node '{node.name}'", own, accepts)
    if kind.prompted:
        check_prompt(cx, node)
    else:
        cx.node_params[node.name] = NodeParams((), ())  # it uses no param, and no template is rendered
    kind.check(cx, node)
    check_type(cx, node.type)


def check_prompt(cx: Context, node: ir.Node) -> None:
    """What a node that renders a prompt names: its prompt param, its demos, its template, its model and its
    system message, each defined."""
    prompt = node.setting("prompt")
    if prompt is not None and isinstance(prompt.value, str) and prompt.value not in cx.params:
        cx.report(
            "E022", prompt.value_span, f"undefined param '{prompt.value}'", help=suggestion(prompt.value, cx.params)
        )
    check_node_demos(cx, node)
    template = node.setting("template")
    if template is not None and isinstance(template.value, str):
        if IDENTIFIER.match(template.value) and template.value not in cx.templates:
            cx.report(
                "E023",
                template.value_span,
                f"undefined template '{template.value}'",
                help=suggestion(template.value, cx.templates),
            )
            cx.tainted.add(node.name)  # its template is unknown: checking what it uses would only guess
    model = node.setting("model")
    if model is not None and isinstance(model.value, str) and model.value not in cx.models:
        cx.report("E071", model.value_span, f"undefined model '{model.value}'", help=suggestion(model.value, cx.models))
    check_system(cx, node)


def check_system(cx: Context, node: ir.Node) -> None:
    """`system = NAME` names a param or a template, not both."""
    system = node.setting("system")
    if system is None or not isinstance(system.value, str) or not IDENTIFIER.match(system.value):
        return
    if system.value in cx.params and system.value in cx.templates:
        notes = [
            Note(cx.params[system.value].span, "the param"),
            Note(cx.templates[system.value].span, "the template"),
        ]
        cx.report("E073", system.value_span, f"'{system.value}' names both a param and a template", notes=notes)
        cx.tainted.add(node.name)
    elif system.value not in cx.params and system.value not in cx.templates:
        hint = suggestion(system.value, [*cx.params, *cx.templates])
        cx.report("E072", system.value_span, f"undefined param or template '{system.value}'", help=hint)
        cx.tainted.add(node.name)


def check_functions(cx: Context) -> None:
    """Each function's `"module:name"`, read without importing anything (where the module may come from is
    source.diagnose's to say: it looks at the files beside the pipeline)."""
    used = {name for node in cx.p.nodes for name in kind_of(node).functions(node)}
    for function in cx.functions.values():
        if function.name not in used:
            cx.report("W010", function.span, f"function '{function.name}' is not used by any node")
        target = parse_target(function.target)
        if isinstance(target, str):
            cx.report("E080", function.literal, target)
        check_settings(cx, f"function '{function.name}'", function.settings, FUNCTION_SETTINGS)
        description = function.setting("description")
        if description is not None and isinstance(description.value, str) and description.value not in cx.params:
            cx.report(
                "E113",
                description.value_span,
                f"function '{function.name}': its description names no param '{description.value}'",
                help=suggestion(description.value, cx.params) or 'declare it: param NAME = "what the tool does"',
            )


def check_locks(cx: Context) -> None:
    """Each MCP server's tools are in the lock, made from its settings as they are (reading the lock, never
    starting a server)."""
    lock = mcp_servers.read_lock(mcp_servers.lock_path(cx.p.path)) if cx.servers and cx.p.path else None
    for block in cx.servers.values():
        tools = mcp_servers.locked_tools(lock, mcp_servers.Server.of(block))
        if isinstance(tools, str):
            cx.report("E173", block.span, tools, help=f"start it once and lock its tools: sbpc tools sync {cx.p.path}")
            continue
        for setting in block.settings:  # `serch.description = ...`: a tool the server does not have
            tool = setting.key.partition(".")[0]
            if "." in setting.key and tool not in tools:
                message = f"the MCP server '{block.name}' has no tool '{tool}' (as locked)"
                cx.report("E175", setting.span, message, help=suggestion_or_list(tool, tools))


def check_node_demos(cx: Context, node: ir.Node) -> None:
    """`demos = NAME` names a demos param (a node that renders no prompt refuses it); a demos param is no
    prompt."""
    for key in ("prompt", "system"):
        setting = node.setting(key)
        param = cx.params.get(setting.value) if setting is not None and isinstance(setting.value, str) else None
        if setting is not None and param is not None and param.is_demos:
            cx.report(
                "E093",
                setting.value_span,
                f"'{param.name}' is a demos param: it holds examples, not a {key}",
                help=f"give the node `demos = {param.name}` and show them with {{{{ {param.name} }}}} in its template",
            )
            cx.tainted.add(node.name)
    setting = node.setting("demos")
    if setting is None or not isinstance(setting.value, str):
        return
    param = cx.params.get(setting.value)
    if param is None or not param.is_demos:
        demos = [name for name, p in cx.params.items() if p.is_demos]
        what = (
            f"'{setting.value}' is a text param, not a demos param"
            if param
            else f"undefined demos param '{setting.value}'"
        )
        cx.report("E090", setting.value_span, what, help=suggestion(setting.value, demos))
        return
    cx.demos[node.name] = param.name


def check_type(cx: Context, type_: ir.OutputType) -> None:
    if type_.kind == "choice" and len(set(type_.choices)) != len(type_.choices):
        cx.report("E047", type_.span, "a choice lists the same option twice")
    if type_.kind == "choice" and not all(c.strip() for c in type_.choices):
        cx.report("E048", type_.span, "a choice option cannot be empty")
    seen: dict[str, ir.Field] = {}
    for field in type_.fields:
        if field.name in seen:
            cx.report(
                "E074",
                field.span,
                f"a record lists the field '{field.name}' twice",
                notes=[first_here(seen[field.name].span)],
            )
        elif field.name.startswith("_"):
            cx.report("E075", field.span, f"a field name cannot start with '_' (templates cannot read '{field.name}')")
        seen.setdefault(field.name, field)
        check_type(cx, field.type)


def check_block(cx: Context, block: ir.Block) -> None:
    allowed = BLOCKS.get(block.kind)
    if allowed is None:
        cx.report("E035", block.span, f"unknown block '{block.kind}'", help=suggestion_or_list(block.kind, BLOCKS))
        return
    if block.kind == "model" and block.name == "default":
        cx.report(
            "E079",
            block.span,
            "a model cannot be named 'default'",
            help="settings every model shares go in `model { }`",
        )
    if block.kind == "optimize" and block.name is not None:
        cx.report("E037", block.span, "an optimize block takes no name")
    if block.kind == mcp_servers.KIND:
        own = [s for s in block.settings if "." not in s.key]  # `search.description`: its tool's, checked there
        check_settings(cx, f"mcp block '{block.name}'", own, allowed)
        mcp_servers.check_server(cx.report, block, cx.params)
        return
    check_settings(cx, f"{block.kind} block", block.settings, allowed)
    base = next((s for s in block.settings if s.key == "api_base" and isinstance(s.value, str)), None)
    problem = url_problem(str(base.value)) if base is not None else None
    if base is not None and problem:
        cx.report("E069", base.value_span, f"api_base {problem}")
    if block.kind == "model":
        check_provider(cx, block)
        check_price(cx, block)


def check_price(cx: Context, block: ir.Block) -> None:
    """A declared price names both halves (here, or in an unnamed block it takes its settings from): a call is
    charged for its prompt and its reply, and a missing half would be charged nothing."""
    shared = {s.key for b in cx.p.blocks if b.kind == "model" and b.name is None for s in b.settings}
    own = {s.key: s for s in block.settings if s.key in PRICES}
    missing = [key for key in PRICES if key not in own and key not in shared]
    if own and missing:
        first = next(iter(own.values()))
        cx.report(
            "E137",
            first.span,
            f"'{first.key}' without '{missing[0]}': a declared price needs both",
            help=f"add `{missing[0]} = ...` (dollars per million tokens; 0 if free)",
        )


def check_provider(cx: Context, block: ir.Block) -> None:
    """A model name's provider is one litellm knows: a misspelt one (`opneai/...`) would fail only at the first
    call, blamed on the server. A Router's model group is its own name, whatever it looks like."""
    keys = {s.key for s in block.settings}
    name = next((s for s in block.settings if s.key == "name" and isinstance(s.value, str)), None)
    provider = provider_of(str(name.value)) if name is not None and "router" not in keys else None
    bare = no_provider(str(name.value)) if name is not None and "router" not in keys else None
    if name is not None and bare is not None:
        cx.report("E161", name.value_span, bare[0], help=bare[1])
    if name is not None and provider is not None and provider not in PROVIDERS:
        cx.report(
            "E128",
            name.value_span,
            f"unknown provider '{provider}' in model name '{name.value}'",
            help=suggestion(provider, sorted(PROVIDERS))
            or "a model name is `provider/model`, e.g. openai/gpt-4o-mini (`openai/...` for any OpenAI-compatible server)",
        )


def check_edges(cx: Context):
    """Predecessors, successors and the checked statements, each checked as the product it is.

    A target fed by one statement shares that statement's tuple of sources, so a statement of
    n x m names costs n + m, not n * m. A name is reported once per statement, and a node whose
    in-edges are incomplete (or that a misspelt name probably meant) is not checked further.
    """
    pairs = sum(len(edge.sources) * len(edge.targets) for edge in cx.p.edges)
    if pairs > MAX_EDGES:  # the graph itself would not fit: running it means a call per pair and sample
        biggest = max(cx.p.edges, key=lambda e: len(e.sources) * len(e.targets))
        cx.report(
            "E041",
            biggest.sources[0].span,
            f"the edges declare {pairs:,} pairs; a pipeline may have at most {MAX_EDGES:,}",
        )
        return {n.name: () for n in cx.p.nodes}, {n: () for n in cx.nodes}, []
    feeds: dict[str, list[tuple[str, ...]]] = {n.name: [] for n in cx.p.nodes}
    fed: dict[str, list[tuple[str, ...]]] = {n: [] for n in cx.nodes}
    statements: list[Statement] = []
    reported: set[int] = set()
    for edge in cx.p.edges:
        sources = tuple(ref for ref in edge.sources if defined(cx, ref, reported))
        targets = []
        for ref in edge.targets:
            if not defined(cx, ref, reported):
                continue
            if ref.name not in cx.node_names:
                if id(ref) not in reported:
                    cx.report("E025", ref.span, f"'{ref.name}' is an input; edges can only lead into nodes")
                    reported.add(id(ref))
                continue
            targets.append(ref.name)
        if len(sources) < len(edge.sources):
            cx.tainted.update(targets)
        feeding, fed_by_each = distinct(cx, sources, targets), tuple(dict.fromkeys(targets))
        statements.append(Statement(feeding, fed_by_each))
        for target in fed_by_each:
            feeds[target].append(feeding)
        for source in feeding:
            fed[source].append(fed_by_each)
    predecessors = {target: merge(cx, target, groups) for target, groups in feeds.items()}
    successors = {name: join(groups) for name, groups in fed.items()}
    return predecessors, successors, statements


def distinct(cx: Context, sources: tuple[ir.Ref, ...], targets: list[str]) -> tuple[str, ...]:
    """The names of one statement's sources, each once (a repeat is warned about)."""
    names: dict[str, ir.Ref] = {}
    for ref in sources:
        if ref.name in names:
            for target in dict.fromkeys(targets):
                message = f"edge {ref.name} -> {target} is declared twice"
                cx.report("W005", ref.span, message, notes=[first_here(names[ref.name].span)])
        names.setdefault(ref.name, ref)
    return tuple(names)


def defined(cx: Context, ref: ir.Ref, reported: set[int]) -> bool:
    if ref.name in cx.nodes:
        return True
    if id(ref) not in reported:
        reported.add(id(ref))
        hint = suggestion(ref.name, cx.nodes)
        cx.report("E024", ref.span, f"undefined node or input '{ref.name}'", help=hint)
        if hint:  # the node it probably meant lacks this edge: its template errors would be noise
            cx.tainted.add(hint.split("'")[1])
    return False


def merge(cx: Context, target: str, groups: list[tuple[str, ...]]) -> tuple[str, ...]:
    """The sources feeding `target`, in edge order: the one statement's tuple itself when only one
    feeds it; a pair declared in two statements is warned about."""
    if len(groups) == 1:
        return groups[0]
    seen: dict[str, None] = {}
    for group in groups:
        for name in group:
            if name in seen:
                first = edge_span(cx, name, target, last=False)
                notes = [first_here(first)] if first else []
                cx.report(
                    "W005", edge_span(cx, name, target), f"edge {name} -> {target} is declared twice", notes=notes
                )
            seen[name] = None
    return tuple(seen)


def edge_span(cx: Context, source: str, target: str, last: bool = True) -> ir.Span | None:
    """Where `source -> target` is declared last (for a warning about a repeated edge), or first."""
    for edge in reversed(cx.p.edges) if last else cx.p.edges:
        if any(t.name == target for t in edge.targets):
            ref = next((s for s in edge.sources if s.name == source), None)
            if ref is not None:
                return ref.span
    return None


def join(groups: list[tuple[str, ...]]) -> tuple[str, ...]:
    return groups[0] if len(groups) == 1 else tuple(dict.fromkeys(name for group in groups for name in group))


class Statement(NamedTuple):
    """One edge statement once checked: its distinct defined sources feed each of its node targets."""

    sources: tuple[str, ...]
    targets: tuple[str, ...]


def check_cycles(cx: Context, predecessors, statements: list[Statement]) -> tuple[str, ...]:
    """Kahn's algorithm in declaration order; what is left over lies on or behind a cycle.

    A statement counts down its node sources as they are sorted, and its targets count down
    unfinished statements, so a statement of n x m nodes costs n + m steps, not n * m: a target
    is ready when its last statement is, which is when its last predecessor is.
    The cycles reported cover every node that lies on one, two cycles sharing a node included.
    """
    countdown = Countdown(cx, statements)
    order = countdown.sort([name for name, waiting in countdown.waiting.items() if waiting == 0])
    stuck = [n for n, waiting in countdown.waiting.items() if waiting > 0]
    for cycle in cycles_covering(stuck, predecessors):
        cx.report("E040", cx.nodes[cycle[0]].span, f"cycle: {' -> '.join(cycle)}")
    return tuple(order)


class Countdown:
    """What each node and statement still waits for, during a topological sort."""

    def __init__(self, cx: Context, statements: list[Statement]):
        self.statements = statements
        self.pending = [sum(1 for s in st.sources if s in cx.node_names) for st in statements]  # node sources unsorted
        self.waiting = {n.name: 0 for n in cx.p.nodes}  # statements with unsorted node sources feeding a node
        self.feeds: dict[str, list[int]] = {}  # node -> the statements it is a source of, in file order
        for index, statement in enumerate(statements):
            if self.pending[index]:
                for target in statement.targets:
                    self.waiting[target] += 1
                for source in statement.sources:
                    if source in cx.node_names:
                        self.feeds.setdefault(source, []).append(index)

    def finish(self, name: str) -> list[str]:
        """`name` is sorted: the targets that waited for it last, in the order its successors are listed."""
        done = []
        for index in self.feeds.get(name, ()):
            self.pending[index] -= 1
            if self.pending[index] == 0:
                done.append(self.statements[index].targets)
        for targets in done:
            for target in targets:
                self.waiting[target] -= 1
        # a target of several finished statements is ready after the last, but listed where it first appears
        return list(dict.fromkeys(t for targets in done for t in targets if self.waiting[t] == 0))

    def sort(self, ready: list[str], among: dict | None = None) -> list[str]:
        queue = deque(ready)
        order: list[str] = []
        while queue:
            name = queue.popleft()
            order.append(name)
            queue.extend(t for t in self.finish(name) if among is None or t in among)
        return order


def cycles_covering(stuck: list[str], predecessors) -> list[list[str]]:
    """Cycles among the nodes Kahn's algorithm left over, until each node on a cycle is on a reported one.

    Some left-over nodes only lie behind a cycle; the nodes on cycles are those of the strongly connected
    components with an edge inside them. Within a component, the shortest cycle through its first node
    not yet covered is reported, in declaration order, so each report adds a node.
    """
    cycles: list[list[str]] = []
    for component in components(stuck, predecessors):
        uncovered = dict.fromkeys(component)
        while uncovered and len(cycles) < MAX_CYCLES_REPORTED:
            cycle = shortest_cycle(next(iter(uncovered)), predecessors, component)
            if cycle is None:  # a component of one node with no edge to itself
                break
            cycles.append(cycle)
            for name in cycle:
                uncovered.pop(name, None)
    return cycles


def components(nodes: list[str], predecessors) -> list[list[str]]:
    """Strongly connected components of the graph on `nodes` (Tarjan's, without recursion), each in
    declaration order, ordered by their first node."""
    among = {name: i for i, name in enumerate(nodes)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(predecessors.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            name, preds = work[-1]
            pred = next((p for p in preds if p in among), None)
            if pred is not None:
                if pred not in index:
                    index[pred] = low[pred] = len(index)
                    stack.append(pred)
                    on_stack.add(pred)
                    work.append((pred, iter(predecessors.get(pred, ()))))
                elif pred in on_stack:
                    low[name] = min(low[name], index[pred])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[name])
            if low[name] == index[name]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == name:
                        break
                found.append(sorted(component, key=among.__getitem__))
    return sorted(found, key=lambda c: among[c[0]])


def shortest_cycle(start: str, predecessors, component: list[str]) -> list[str] | None:
    """The shortest cycle through `start` inside its component, as `start -> ... -> start`, or None."""
    inside = set(component)
    came_from: dict[str, str] = {}  # a node reached walking back -> the node it feeds
    queue = deque([start])
    while queue:
        name = queue.popleft()
        for pred in predecessors.get(name, ()):
            if pred == start:
                path = [start, name]
                while path[-1] != start:
                    path.append(came_from[path[-1]])
                return path
            if pred in inside and pred not in came_from:
                came_from[pred] = name
                queue.append(pred)
    return None


def check_output(cx: Context) -> tuple[ir.Node | None, str]:
    """The output node, and how it is named in messages (`judge.verdict` for a field of a record)."""
    outputs = cx.p.outputs
    if not outputs:
        cx.report("E042", cx.p.span, "no output node: add `output <node>`")
        return None, ""
    for extra in outputs[1:]:
        cx.report(
            "E043",
            extra.span,
            "a pipeline has one output",
            notes=[Note(outputs[0].span, "the output is declared here")],
        )
    ref, part = outputs[0].node, outputs[0].record_field
    if ref.name not in cx.node_names:
        if ref.name in cx.nodes:
            cx.report("E026", ref.span, f"undefined node '{ref.name}' (an input cannot be the output)")
        else:
            cx.report("E026", ref.span, f"undefined node '{ref.name}'", help=suggestion(ref.name, cx.node_names))
        return None, ""
    node = next(node for node in cx.p.nodes if node.name == ref.name)  # a node, even where an input has its name
    if part is None:
        return node, node.name
    if node.type.kind != "record":
        cx.report("E077", part.span, f"node '{node.name}' is {node.type}, not a record: it has no field '{part.name}'")
        return None, ""
    if node.type.field(part.name) is None:
        no_field(cx, part.span, node.name, part.name)
        return None, ""
    return node, f"{node.name}.{part.name}"


def no_field(cx: Context, span: ir.Span, node: str, field: str) -> None:
    fields = cx.records[node]
    help = suggestion(field, fields) or f"its fields are {', '.join(fields)}"
    cx.report("E076", span, f"node '{node}' has no field '{field}'", help=help)


def check_metric(cx: Context, output: ir.Node | None, label: str) -> str:
    """The metric scored: the one `metric NAME` names (a built-in or one the file defines), else the first the
    file defines, else the output type's."""
    for extra in cx.p.metrics[1:]:
        first = Note(cx.p.metrics[0].span, "the metric is declared here")
        cx.report("E044", extra.span, "a pipeline has one metric", notes=[first])
    scored = output_type(output, cx.p.outputs[0] if cx.p.outputs else None)
    if not cx.p.metrics:
        return cx.p.metric_defs[0].name if cx.p.metric_defs else default_metric(scored)
    ref = cx.p.metrics[0]
    known = [*METRICS, *cx.metric_defs]
    if ref.name not in known:
        cx.report("E045", ref.span, f"unknown metric '{ref.name}'", help=suggestion_or_list(ref.name, known))
    elif scored is not None and ref.name == "numeric" and scored.kind != "number":
        cx.report("E046", ref.span, f"metric 'numeric' needs a number output, but '{label}' is {scored}")
    return ref.name


def async_beside(path: str | None, target: Target) -> bool:
    """Whether the module beside the pipeline at `path` defines `target` with `async def` (read, not imported)."""
    if not path or not os.path.isfile(path):
        return False
    place = beside(os.path.dirname(os.path.abspath(path)), target.module)
    return place.path is not None and defined_async(place.path, target.attr)


def check_metric_def(cx: Context, metric: ir.MetricDef) -> None:
    """A metric the file defines: a name of its own, and a function's `module:function` or a judge's rubric (a
    frozen param reading only what a judge is shown), model and scale."""
    if metric.name in METRICS:
        cx.report("E100", metric.span, f"'{metric.name}' is a built-in metric; give yours another name")
    if metric.function is not None:
        target = parse_target(metric.function)
        if isinstance(target, str):  # read as a function node's `"module:name"` is, without importing
            cx.report(
                "E105",
                metric.value_span,
                f"function metric '{metric.name}': {target}",
                help='for a function overlap in metrics.py beside the pipeline: "metrics:overlap"',
            )
        elif async_beside(cx.p.path, target):
            cx.report(
                "E150",
                metric.value_span,
                f"metric '{metric.name}' is an async function; a metric is a plain function (prediction, example)"
                " -> score",
                help="define it with `def`; to await something inside it, use asyncio.run(...)",
            )
        return
    check_settings(cx, f"metric '{metric.name}'", metric.settings, JUDGE_SETTINGS)
    model, scale, prompt = metric.setting("model"), metric.setting("scale"), metric.setting("prompt")
    if model is not None and isinstance(model.value, str) and model.value not in cx.models:
        cx.report("E071", model.value_span, f"undefined model '{model.value}'", help=suggestion(model.value, cx.models))
    if scale is not None and isinstance(scale.value, str) and parse_scale(scale.value) is None:
        cx.report(
            "E102", scale.value_span, f"a judge's scale is LOW..HIGH with LOW below HIGH (as 1..5), not {scale.value!r}"
        )
    if prompt is None:
        cx.report(
            "E101", metric.span, f"judge '{metric.name}' has no rubric", help="add `prompt = PARAM`, a frozen param"
        )
        return
    if not isinstance(prompt.value, str):
        return
    param = cx.params.get(prompt.value)
    if param is None:
        cx.report(
            "E022", prompt.value_span, f"undefined param '{prompt.value}'", help=suggestion(prompt.value, cx.params)
        )
        return
    if not param.frozen:
        cx.report(
            "E103",
            param.span,
            f"param '{param.name}' is the rubric of judge '{metric.name}', so it must be frozen",
            help=f"write `frozen param {param.name} = ...`: sbpc does not optimize the metric it optimizes against",
            notes=[Note(prompt.value_span, "used as a rubric here")],
        )
    if "{" in param.text:
        allowed = frozenset([*(i.name for i in cx.p.inputs), "output", "expected"])

        def misuse(name: str) -> str:
            return f"rubric '{param.name}' uses '{name}'; a rubric may use the inputs, output and expected"

        template_variables(cx, param.text, param.literal, allowed, ("E104", misuse), what=f" in param '{param.name}'")


def template_variables(
    cx: Context,
    text: str,
    literal: ir.Span,
    allowed: Set[str],
    misuse: tuple[str, Callable[[str], str]],
    what: str = "",
    builtin: bool = False,
    params: Set[str] = frozenset(),
    demos: frozenset[tuple[str, tuple[str, ...]]] = frozenset(),
) -> frozenset | None:
    """The variables a template reads, after reporting its syntax errors, every name outside `allowed` and
    `params` (`misuse`: the code and the message for such a name) and every field of a record output it
    misnames; then, when all it reads is there, whether it renders at all (`demos`: each demos param it may
    read, with the fields of its examples)."""
    try:
        used = variables(text)
    except TemplateProblem as exc:
        code = "E051" if exc.kind == "loads" else "E050"
        where = cx.locate(literal, None, exc.lineno)
        cx.report(code, where, f"template{' syntax' if exc.kind == 'syntax' else ''}{what}: {exc.message}")
        return None
    code, message = misuse
    unknown = [name for name in used - allowed if name not in params]
    for name in sorted(unknown):
        cx.report(code, cx.locate(literal, name), message(name))
    if not builtin and not check_fields_read(cx, text, literal, allowed):
        return used
    if not unknown and text != DEFAULT_TEMPLATE:
        records = frozenset() if builtin else frozenset((n, cx.records[n]) for n in used & allowed if n in cx.records)
        shown = frozenset((name, keys) for name, keys in demos if name in used)
        failure, certain = timed_trial(cx, literal, what, (text, used, builtin, records, shown))
        if failure is not None:  # an error when no data can help, else a warning
            cx.report(
                "E052" if certain else "W006",
                cx.locate(literal, None, failure.lineno),
                f"template{what} {'cannot' if certain else 'may not'} render: {failure.message}",
            )
    return used


def timed_trial(cx: Context, literal: ir.Span, what: str, given: tuple) -> tuple[RenderError | None, bool]:
    """trial_render within the seconds the check has left for renders (a template many nodes share is
    rendered once); once they are spent, the template is not tried, and that is said once."""
    if given in cx.rendered:
        return cx.rendered[given]
    if cx.render_seconds <= 0:
        untried(cx, literal, what)
        return None, False
    start = time.monotonic()
    found = cx.rendered[given] = trial_render(*given, until=start + cx.render_seconds)
    cx.render_seconds -= time.monotonic() - start
    return found


def untried(cx: Context, literal: ir.Span, what: str) -> None:
    """The first template left untried once the check's time for renders was spent, said once."""
    if not cx.untried:
        cx.untried = True
        cx.report(
            "W006",
            cx.locate(literal, None, None),
            f"template{what} not tried: this check's {MAX_SECONDS:g} s for rendering templates were spent, "
            "so it and the templates after it may not render",
        )


def check_fields_read(cx: Context, text: str, literal: ir.Span, received: Set[str]) -> bool:
    """Whether every `{{ judge.verdict }}` names a field the record output `judge` has; each that does not
    is reported."""
    fine = True
    for name, field in sorted(reads(text).fields):
        if name not in received or name not in cx.nodes:
            continue
        if name in cx.records and field not in cx.records[name]:
            no_field(cx, cx.locate(literal, field), name, field)
            fine = False
        type_ = cx.nodes[name].type
        if type_.kind in SCALAR_KINDS and not hasattr(str, field):  # a str method, such as upper, renders
            what = "node" if name in cx.node_names else "input"
            cx.report(
                "E077",
                cx.locate(literal, field),
                f"{what} '{name}' is {type_}, not a record: it has no field '{field}'",
                help=field_elsewhere(cx, field, received) or f"`{{{{ {name} }}}}` is its whole value",
            )
            fine = False
    return fine


def field_elsewhere(cx: Context, field: str, received: Set[str]) -> str:
    """`did you mean 'judge.reason'?` when a record this template receives has a field close to `field`."""
    read = [f"{node}.{name}" for node, names in cx.records.items() if node in received for name in names]
    close = difflib.get_close_matches(field, [r.split(".", 1)[1] for r in read], n=1, cutoff=0.6)
    return next((f"did you mean '{r}'?" for r in read if close and r.endswith("." + close[0])), "")


class TemplateSource(NamedTuple):
    """A template a node renders (its forward template or its system message), and how messages name it."""

    text: str
    literal: ir.Span
    label: str
    explicit: bool  # the file gives it (not the default template)


def check_template_variables(cx: Context, node: ir.Node, received: tuple[str, ...]) -> None:
    """What the node's template and system message read: its inputs, `prompt`, and params (which the node then
    uses); each param it uses must in turn read only the node's inputs."""
    setting = node.setting("template")
    key = (id(received), setting is None)
    if key not in cx.received_sets:  # nodes fed by one statement share `received`: one set for all
        cx.received_sets[key] = frozenset(received) | {"prompt"} | ({"inputs"} if setting is None else set())
    allowed = cx.received_sets[key]
    sources = template_sources(cx, node)
    own = cx.demos.get(node.name)
    shapes = frozenset({(own, (*received, node.name))} if own else ())
    found: list[frozenset[str]] = []
    shown = False
    for source in sources:

        def misuse(name: str, label: str = source.label) -> str:
            return (
                f"{label} uses '{name}', which node '{node.name}' does not receive"
                f" (it receives: {', '.join(received) or 'nothing'})"
            )

        used = template_variables(
            cx, source.text, source.literal, allowed, ("E053", misuse), params=cx.params.keys(), demos=shapes
        )
        if used is None:
            return
        shown = check_demos_shown(cx, node, source, used - allowed) or shown
        check_names_read(cx, node, source, used, allowed)
        found.append(frozenset(n for n in used - allowed if n in cx.params and not cx.params[n].is_demos))
    if own is not None and not shown:
        cx.report(
            "E091",
            setting.value_span if setting is not None else node.span,
            f"node '{node.name}' has the demos '{own}', but its template never shows them",
            help=f"put {{{{ {own} }}}} in the template where the examples belong",
        )
    uses = params_named(cx, node, sources, found)
    bound = kind_of(node).bound_params(node, cx.tools, cx.params)  # e.g. its tools' descriptions
    uses = uses._replace(instruction=tuple(dict.fromkeys(uses.instruction + bound)))
    cx.node_params[node.name] = uses
    for name in dict.fromkeys(uses.instruction + uses.system):
        check_param(cx, cx.params[name], node, allowed)


def template_sources(cx: Context, node: ir.Node) -> list[TemplateSource]:
    """The node's forward template, then its system message when that is a template (not a param)."""
    setting, system = node.setting("template"), node.setting("system")
    named = cx.templates.get(str(setting.value)) if setting else None
    sources = [
        TemplateSource(
            template_source(cx.p, node),
            named.literal if named else (setting.value_span if setting else node.span),
            f"template '{named.name}'" if named else ("the template" if setting else "its template"),
            setting is not None,
        )
    ]
    if system is not None and str(system.value) not in cx.params:
        of_system = cx.templates.get(str(system.value))
        label = f"template '{of_system.name}'" if of_system else "the system message"
        literal = of_system.literal if of_system else system.value_span
        sources.append(TemplateSource(system_source(cx.p, node) or "", literal, label, True))
    return sources


def check_demos_shown(cx: Context, node: ir.Node, source: TemplateSource, outside: Set[str]) -> bool:
    """Whether a template shows the node's own demos; demos of another node it shows are reported (E093)."""
    own = cx.demos.get(node.name)
    shown = False
    for name in sorted(n for n in outside if n in cx.params and cx.params[n].is_demos):
        if name == own:
            shown = True
            continue
        cx.report(
            "E093",
            cx.locate(source.literal, name),
            f"{source.label} shows the demos '{name}', but node '{node.name}' does not have them",
            help=f"add `demos = {name}` to node '{node.name}'",
        )
    return shown


def check_names_read(cx: Context, node: ir.Node, source: TemplateSource, used: Set[str], allowed: Set[str]) -> None:
    """A name a template reads that is both a param and an input (E078); `{{ prompt }}` without a prompt (E054)."""
    for name in sorted(n for n in used & allowed if n in cx.params and n not in ("prompt", "inputs")):
        where = cx.locate(source.literal, name)
        cx.report("E078", where, f"'{name}' is both a param and an input of node '{node.name}'", help="rename one")
    if source.explicit and "prompt" in used and node.setting("prompt") is None:
        cx.report("E054", node.span, f"node '{node.name}' has no prompt, but {source.label} uses '{{{{ prompt }}}}'")


def params_named(cx: Context, node: ir.Node, sources: list[TemplateSource], found: list[frozenset[str]]) -> NodeParams:
    """The params a node uses, in the order it names them: its prompt, those its template names, and those of its
    system message (a param itself, or those its template names)."""
    named = [  # params each source names, in the order it names them
        tuple(name for name in reads(source.text).order if name in params) if params else ()
        for source, params in zip(sources, found)
    ]
    prompt, system = node.setting("prompt"), node.setting("system")
    prompt_param = (str(prompt.value),) if prompt is not None and str(prompt.value) in cx.params else ()
    if system is not None and str(system.value) in cx.params:
        named.append((str(system.value),))
    return NodeParams(tuple(dict.fromkeys(prompt_param + named[0])), named[1] if len(named) > 1 else ())


def check_param(cx: Context, param: ir.Param, node: ir.Node, allowed: frozenset[str]) -> None:
    """A param a node uses: not longer than a prompt may be, and reading only the node's inputs."""
    if len(param.text) > MAX_OUTPUT_CHARS:
        cx.report(
            "E057",
            param.span,
            f"param '{param.name}' is {len(param.text):,} characters; a prompt may be at most {MAX_OUTPUT_CHARS:,}",
        )
        return
    if "{" not in param.text:  # plain text reads nothing
        return
    template_variables(
        cx,
        param.text,
        param.literal,
        allowed - {"prompt", "inputs"},
        ("E055", lambda name: f"param '{param.name}' uses '{name}', which node '{node.name}' does not receive"),
        what=f" in param '{param.name}'",
    )


def check_demos(cx: Context, predecessors: dict[str, tuple[str, ...]]) -> None:
    """Each demos param: its `max` a positive whole number its examples fit in, one node to show it, and
    every example that node's inputs and output by name, each once."""
    owners: dict[str, list[str]] = {}
    for node, name in cx.demos.items():
        owners.setdefault(name, []).append(node)
    for param in cx.params.values():
        if not param.is_demos:
            continue
        most = check_max(cx, param)
        count = len(param.demos or ())
        if most is not None and count > most:
            cx.report(
                "E099",
                param.literal,
                f"demos '{param.name}' holds {count} examples, more than its max {most}",
                help=f"remove {count - most}, or raise max",
            )
        if param.frozen and not count:
            cx.report("W012", param.span, f"frozen demos '{param.name}' has no examples: its node is shown none")
        nodes = owners.get(param.name, [])
        for extra in nodes[1:]:
            cx.report(
                "E094",
                next(n for n in cx.p.nodes if n.name == extra).setting("demos").span,  # type: ignore[union-attr]
                f"demos '{param.name}' is already node '{nodes[0]}''s: a demos param belongs to one node",
                help="declare another demos param for this node",
            )
        if nodes and nodes[0] not in cx.tainted:
            keys = (*predecessors.get(nodes[0], ()), nodes[0])
            for index, example in enumerate(param.demos or (), start=1):
                check_example(cx, param, index, example, nodes[0], keys)


def check_max(cx: Context, param: ir.Param) -> int | None:
    """A demos param's `max` (demos.limit), reported when it is no whole number of 1 or more, or bounds only
    hand-written examples."""
    value = limit(param)
    if param.max is not None and value is None:
        cx.report(
            "E095", param.max.value_span, f"max must be a whole number of examples, 1 or more, not {param.max.value!r}"
        )
    elif param.max is not None and param.frozen:
        cx.report(
            "W011",
            param.max.span,
            f"demos '{param.name}' is frozen: the optimizer picks no examples for it, so its max only bounds yours",
        )
    return value


def check_example(cx: Context, param: ir.Param, index: int, example: ir.Example, node: str, keys: tuple) -> None:
    seen: dict[str, ir.Setting] = {}
    for field in example.fields:
        if field.key in seen:
            cx.report(
                "E098",
                field.span,
                f"example {index} of demos '{param.name}' gives '{field.key}' twice",
                notes=[first_here(seen[field.key].span)],
            )
            continue
        seen[field.key] = field
        if field.key not in keys:
            cx.report(
                "E096",
                field.span,
                f"example {index} of demos '{param.name}' gives '{field.key}', which node '{node}' neither receives "
                "nor answers",
                help=suggestion(field.key, keys) or f"its examples give {', '.join(keys)}",
            )
    missing = [key for key in keys if key not in seen]
    if missing:
        cx.report(
            "E097",
            example.span,
            f"example {index} of demos '{param.name}' lacks {', '.join(repr(k) for k in missing)}",
            help=f"an example of node '{node}' gives each of its inputs and its output: {', '.join(keys)}",
        )


def check_builtin_overrides(cx: Context) -> None:
    for template in cx.p.templates:
        if template.name in BUILTIN:
            allowed = BUILTIN[template.name]
            misuse = f"template '{template.name}' uses '{{}}'; it may use {', '.join(sorted(allowed))}"
            template_variables(cx, template.text, template.literal, allowed, ("E056", misuse.format), builtin=True)


def warn_format_in_trainable(cx: Context, output: ir.Node | None) -> None:
    """The options of a choice output named only in a trainable param: one rewrite can drop them, and
    every answer after it is unreadable (the gate then rejects the step with nothing to show why)."""
    uses = cx.node_params.get(output.name) if output is not None else None
    if output is None or output.type.kind != "choice" or uses is None:
        return
    params = [cx.params[name] for name in dict.fromkeys(uses.instruction + uses.system)]
    system = system_source(cx.p, output) or ""

    def names_every_option(text: str) -> bool:
        return all(re.search(rf"(?<!\w){re.escape(option)}(?!\w)", text) for option in output.type.choices)

    stable = [template_source(cx.p, output), system, *(p.text for p in params if p.frozen)]
    if any(names_every_option(text) for text in stable):
        return
    param = next((p for p in params if not p.frozen and names_every_option(p.text)), None)
    if param is not None:
        cx.report(
            "W007",
            param.span,
            f"param '{param.name}' is the only place that says how to answer ({', '.join(output.type.choices)}), "
            "and the optimizer may rewrite that away",
            help="state the answer format in the node's template, or in a frozen param the template uses",
        )


def check_models(cx: Context) -> None:
    """A named model no node uses (nor lists among the models it may move to) is a misspelt role when it is close
    to one (an error), else only unused."""
    naming: list[ir.Node | ir.MetricDef] = [*cx.p.nodes, *cx.p.metric_defs]  # nodes, and judges
    used = {str(s.value) for item in naming if (s := item.setting("model"))}
    used |= {str(name) for s in listed_models(cx.p) if isinstance(s.value, tuple) for name in s.value}  # movable to
    used |= {hint.split("'")[1] for name in used if name not in cx.models if (hint := suggestion(name, cx.models))}
    for block in cx.p.blocks:
        if block.kind != "model" or block.name in (None, "default", *MODEL_ROLES) or block.name in used:
            continue
        hint = suggestion(block.name, MODEL_ROLES)
        if hint:
            cx.report("E036", block.span, f"unknown model role '{block.name}'", help=hint)
        else:
            cx.report("W008", block.span, f"model '{block.name}' is not used by any node")
        used.add(block.name)  # one diagnostic for several blocks of one name


def listed_models(pipeline: ir.Pipeline) -> list[ir.Setting]:
    """Every `models` list: the optimize block's, then each node's."""
    optimize = [s for b in pipeline.blocks if b.kind == "optimize" for s in b.settings if s.key == "models"]
    return optimize + [s for node in pipeline.nodes if (s := node.setting("models")) is not None]


def check_model_lists(cx: Context) -> None:
    """Every name in a `models` list (the optimize block's, a node's) is a model of the file, and every name in
    `strategies` a strategy: a misspelt one would be dropped silently at run time. A node's own list needs its own
    `model =` line, the line a move rewrites."""
    strategies = [s for b in cx.p.blocks if b.kind == "optimize" for s in b.settings if s.key == "strategies"]
    for node in cx.p.nodes:
        setting = node.setting("models")
        model = node.setting("model")
        if setting is not None and (model is None or model.value in MODEL_ROLES):
            cx.report(
                "E138",
                setting.span,
                f"node '{node.name}' lists models to move to but names no model of its own",
                help="give it `model = NAME` (a `model NAME { }` block): a move rewrites that line",
            )
    for setting in [*strategies, *listed_models(cx.p)]:
        if not isinstance(setting.value, tuple):
            continue
        known, what = (STRATEGIES, "strategy") if setting.key == "strategies" else (cx.models, "model")
        for name in setting.value:
            if name not in known:
                code = "E136" if what == "strategy" else "E071"
                where = cx.name_in(setting.value_span, name)
                cx.report(
                    code, where, f"undefined {what} '{name}' in {setting.key}", help=suggestion_or_list(name, known)
                )


def names_read(text: str) -> frozenset[str]:
    try:
        return variables(text)
    except TemplateProblem:
        return frozenset()


def warn_unused(cx: Context, predecessors, successors, output: ir.Node | None) -> None:
    """Params, templates and inputs no node uses, and nodes that cannot reach the output."""
    warn_unused_params(cx)
    used_templates = {str(s.value) for n in cx.p.nodes for key in ("template", "system") if (s := n.setting(key))}
    for template in cx.p.templates:
        if template.name not in used_templates and template.name not in BUILTIN:
            cx.report("W002", template.span, f"template '{template.name}' is not used by any node")
    for item in cx.p.inputs:
        if not successors.get(item.name):
            cx.report("W003", item.span, f"input '{item.name}' is not used by any node")
    if output is not None:
        reaches = set().union(*(reaching(ref.name, predecessors) for ref in cx.p.outputs[0].candidates))
        for node in cx.p.nodes:
            if node.name not in reaches:
                cx.report("W004", node.span, f"node '{node.name}' cannot reach the output '{output.name}'")


def check_output_fed(cx: Context, predecessors, output: ir.Node | None) -> None:
    """E162: an output no input reaches, through any path: every sample would send the same prompts and get the
    same answer, so no score could say anything. Named with an edge that would feed it."""
    if output is None or not cx.p.inputs or any(d.severity == "error" for d in cx.diagnostics):
        return  # the graph's own errors first: an undefined name in an edge would look like a missing edge
    reaches = set().union(*(reaching(ref.name, predecessors) for ref in cx.p.outputs[0].candidates))
    if any(item.name in reaches for item in cx.p.inputs):
        return
    first = next((n.name for n in cx.p.nodes if n.name in reaches and not predecessors.get(n.name)), output.name)
    cx.report(
        "E162",
        cx.p.outputs[0].span,
        f"output '{output.name}' depends on no input: every sample would be sent the same prompts",
        help=f"add the edge that feeds it, e.g. `{cx.p.inputs[0].name} -> {first}`",
    )


def warn_unused_params(cx: Context) -> None:
    used = {str(s.value) for n in cx.p.nodes for key in ("prompt", "system", "demos") if (s := n.setting(key))}
    used.update(str(s.value) for m in cx.p.metric_defs if (s := m.setting("prompt")))  # rubrics
    used.update(name for uses in cx.node_params.values() for name in uses.instruction + uses.system)
    for node in cx.p.nodes:  # a node left unchecked may still name params: no warning that would only guess
        if node.name not in cx.node_params:
            used.update(names_read(template_source(cx.p, node)) | names_read(system_source(cx.p, node) or ""))
    for param in cx.p.params:
        if param.name not in used:
            cx.report("W001", param.span, f"param '{param.name}' is not used by any node")


def reaching(output: str, predecessors) -> set[str]:
    """The output and every node and input it is reached from."""
    reaches, stack, walked = {output}, [output], set()
    while stack:
        preds = predecessors.get(stack.pop(), ())
        if id(preds) in walked:  # a tuple shared by the targets of one statement: walk it once
            continue
        walked.add(id(preds))
        for pred in preds:
            if pred not in reaches:
                reaches.add(pred)
                stack.append(pred)
    return reaches


def check(pipeline: ir.Pipeline) -> tuple[Analysis, list[Diagnostic]]:
    """Every rule, in an order where each builds on what the ones before found; all diagnostics at once."""
    cx = Context(pipeline)
    check_reserved(cx)
    for node in pipeline.nodes:
        check_node(cx, node)
    for block in pipeline.blocks:
        check_block(cx, block)
    check_data_blocks(pipeline, cx.report)
    check_functions(cx)
    check_locks(cx)
    predecessors, successors, statements = check_edges(cx)
    order = check_cycles(cx, predecessors, statements)
    output, label = check_output(cx)
    if output is not None:
        check_output_alternatives(cx, pipeline.outputs[0])
    check_paths(cx, order, predecessors, check_conditions(cx))
    metric = check_metric(cx, output, label)
    for metric_def in pipeline.metric_defs:
        check_metric_def(cx, metric_def)
    for node in pipeline.nodes:
        received = predecessors.get(node.name, ())
        maps.check_map(cx, node, received)
        if node.each is not None:  # its templates see the item too
            received = (*received, node.each.item.name)
        if node.name not in cx.tainted and kind_of(node).prompted:  # a node that renders no prompt reads nothing
            check_template_variables(cx, node, received)
    check_demos(cx, predecessors)
    check_builtin_overrides(cx)
    check_models(cx)
    check_model_lists(cx)
    warn_unused(cx, predecessors, successors, output)
    check_output_fed(cx, predecessors, output)
    warn_format_in_trainable(cx, output)
    return Analysis(predecessors, successors, order, metric, cx.node_params, cx.demos), cx.diagnostics
