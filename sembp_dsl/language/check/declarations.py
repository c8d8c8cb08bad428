"""Each declaration on its own: names not reserved, a node's settings as its kind takes them (its prompt,
system message, demos and type), and the Python functions and MCP servers' tools the file names."""

from __future__ import annotations

from .. import ir, mcp_servers
from ..blocks.callables import parse_target
from ..diagnostics import Note, suggestion, suggestion_or_list
from ..kinds import kind_of, taken
from ..nodes import maps
from ..nodes.outputs import fields_of, labels_of
from .context import IDENTIFIER, RESERVED, Context, NodeParams, first_here
from .settings import FUNCTION_SETTINGS, check_settings


def check_reserved(cx: Context) -> None:
    items: list[ir.Input | ir.Node] = [*cx.p.inputs, *cx.p.nodes]
    for item in items:
        if item.name in RESERVED:
            cx.report("E021", item.span, f"'{item.name}' is a reserved word and cannot name an input or node")


def check_nodes(cx: Context) -> None:
    for node in cx.p.nodes:
        check_node(cx, node)


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
    labels = labels_of(type_)
    if len(set(labels)) != len(labels):
        cx.report("E047", type_.span, "a choice lists the same option twice")
    if not all(c.strip() for c in labels):
        cx.report("E048", type_.span, "a choice option cannot be empty")
    seen: dict[str, ir.Field] = {}
    for field in fields_of(type_):
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
