"""A tool loop's tools: which declared functions (and MCP servers' tools) a node names, each one's JSON Schema read
from its source (signatures.py) or its server's lock (mcp_servers.py) without running anything, the checks of
them (E110-E112, E174-E175, W035-W037), and the calls, each within its timeout, as the model is answered."""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .... import telemetry
from ....usercode import Overran, ServerStopped, ToolFailed, call_function
from ... import ir
from ...blocks.callables import parse_target
from ...diagnostics import suggestion
from ...mcp_servers import (
    Server,
    cached_lock,
    is_server_tool,
    lock_path,
    lock_stamp,
    locked_tools,
    server_tool_spec,
    servers,
    split,
    tool_function,
)
from ...mcp_servers import tool_spec as server_spec
from ...messages import ToolCall
from ...nodes.node import GraphNode
from ...signatures import ToolSpec, module_functions, read_tool
from ..function import DEFAULT_TIMEOUT, source_of
from ..kind import Checking, Compiled
from .toolcalls import ToolResult, argument_problem, bounded

DEFAULT_MAX_STEPS = 4  # model calls one sample may make at a tool loop, unless it says `max_steps`


def tools_of(node: GraphNode) -> tuple[str, ...]:
    value = node.settings.get("tools", ())
    return value if isinstance(value, tuple) else ()


def max_steps(node: GraphNode) -> int:
    value = node.settings.get("max_steps", DEFAULT_MAX_STEPS)
    return value if isinstance(value, int) else DEFAULT_MAX_STEPS  # the checker holds it a whole number


def description_param(function: ir.Function | None) -> str | None:
    """The param a function's `description` names, if it names one."""
    setting = function.setting("description") if function is not None else None
    return str(setting.value) if setting is not None else None


def declared_tools(pipeline: ir.Pipeline) -> dict[str, ir.Function]:
    """Every tool a node may name, by that name: the file's functions, and each server's tool a node names as the
    function it stands for (mcp_servers.tool_function)."""
    found = {f.name: f for f in pipeline.functions}
    for node in pipeline.nodes:
        tools = node.setting("tools")
        for name in tools.value if tools is not None and isinstance(tools.value, tuple) else ():
            function = tool_function(pipeline, name) if is_server_tool(name) else None
            if function is not None:
                found.setdefault(name, function)
    return found


@dataclass(frozen=True)
class Unusable:
    """Why a function cannot be a tool, and the fix that fits the cause."""

    why: str
    help: str


SIGNATURE_HELP = "name each argument, with a type that has a JSON form (str, int, float, bool, list, dict)"


def tool_spec(pipeline: ir.Pipeline, function: ir.Function, bound: Callable | None) -> ToolSpec | Unusable | None:
    """A declared function as a tool, read from its module's source without importing it: the module beside the
    pipeline, else (at run time) the file the bound callable came from; a server's tool, from the lock. None: no
    source to read here (a module allowed by name, at check time)."""
    if is_server_tool(function.name):
        spec = server_tool_spec(pipeline, function.name)
        return Unusable(spec, "run `sbpc tools sync FILE`") if isinstance(spec, str) else spec
    target, path = parse_target(function.target), source_of(pipeline, function, bound)
    if path is None and bound is not None:  # `math:sqrt`: built into Python or compiled
        return Unusable(
            "it has no Python source to read its signature from (a built-in or compiled function)",
            "declare a Python function of your own that calls it",
        )
    if path is None or isinstance(target, str):
        return None
    try:
        return read_spec(path, os.stat(path).st_mtime_ns, target.attr, function.name)
    except OSError as exc:
        return Unusable(f"its module cannot be read: {exc.strerror or exc}", f"make {path} readable")


@functools.lru_cache(maxsize=256)
def read_spec(path: str, stamp: int, attr: str, name: str) -> ToolSpec | Unusable:
    """A tool read from a file (once per version of it: `stamp`)."""
    with open(path, "rb") as file:  # bytes: read as Python reads a module (a BOM, a `coding:` line)
        source = file.read()
    spec = read_tool(source, attr, shown_as=name)
    if not isinstance(spec, str):
        return spec
    defined = module_functions(source)
    if attr not in defined and not spec.startswith("the module does not parse"):
        hint = suggestion(attr, defined)
        listed = f"it defines {', '.join(defined)}" if defined else "it defines no function"
        return Unusable(spec, f"{hint} ({listed})" if hint else listed)
    return Unusable(spec, SIGNATURE_HELP if attr in defined else f"fix {os.path.basename(path)}")


def check_server_tool(cx: Checking, node: ir.Node, name: str, where: ir.Span) -> None:
    """`docs.search` in a tools list: a declared server, a tool its lock has (the lock's own state is said once
    per server, by check_locks)."""
    server_name, tool = split(name)
    declared = servers(cx.p)
    block = declared.get(server_name)
    if block is None:
        hint = suggestion(server_name, declared) or f'declare it: mcp {server_name} {{ command = "..." }}'
        cx.report(
            "E174", where, f"node '{node.name}': tool '{name}' names no declared MCP server '{server_name}'", help=hint
        )
        return
    tools = locked_tools(cached_lock(lock_path(cx.p.path), lock_stamp(cx.p.path)), Server.of(block))
    if isinstance(tools, str):
        return
    if tool not in tools:
        hint = (
            suggestion(tool, tools) or f"it has {', '.join(tools) or 'no tool'} (run `sbpc tools sync` if it changed)"
        )
        cx.report(
            "E175",
            where,
            f"node '{node.name}': the MCP server '{server_name}' has no tool '{tool}' (as locked)",
            help=hint,
        )
        return
    function = tool_function(cx.p, name)
    assert function is not None  # its server is declared
    warn_incomplete(cx, f"tool '{name}'", function, server_spec(name, tools[tool]))


TYPED = {"type", "anyOf", "oneOf", "allOf", "enum", "const", "$ref"}  # a schema that says what a value may be


def warn_incomplete(cx: Checking, what: str, function: ir.Function, spec: ToolSpec) -> None:
    """A schema a model is told too little by: an argument of any type, no description, an argument undescribed."""
    server = is_server_tool(function.name)
    untyped = [p.name for p in spec.params if not TYPED & set(p.schema)]
    if untyped:
        fix = "give each a type in the server's input schema" if server else f"annotate it: {untyped[0]}: str"
        cx.report(
            "W035",
            function.literal,
            f"{what}: argument {', '.join(untyped)} has no type, so the model may send any value",
            help=fix,
        )
    if not spec.description and description_param(function) is None:
        fix = (
            "give it a description param: `NAME.description = PARAM` in its mcp block"
            if server
            else (
                f'add a docstring, or a description param: function {function.name} = "{function.target}" {{ description = PARAM }}'
            )
        )
        cx.report("W036", function.literal, f"{what} has no description: the model is not told what it does", help=fix)
    undescribed = [p.name for p in spec.params if not p.description]
    if undescribed and spec.params:
        fix = (
            "describe each in the server's input schema"
            if server
            else f"add to its docstring: Args:\n    {undescribed[0]}: what it is"
        )
        cx.report("W037", function.literal, f"{what}: argument {', '.join(undescribed)} is not described", help=fix)


@dataclass(frozen=True)
class Toolbox:
    """A node's tools as this run has them, by the name the model calls each: its spec, description (its param's
    current text, else its docstring or its server's), callable, timeout and declaration."""

    specs: Mapping[str, ToolSpec]
    descriptions: Mapping[str, str]
    callables: Mapping[str, Callable]
    timeouts: Mapping[str, float]
    declared: Mapping[str, ir.Function]

    @classmethod
    def of(cls, node: GraphNode, graph: Compiled) -> Toolbox | str:
        """The node's tools, by the name the model calls each, or why one cannot be offered."""
        declared_all = declared_tools(graph.pipeline)
        specs, declared = {}, {}
        for name in tools_of(node):
            spec = tool_spec(graph.pipeline, declared_all[name], graph.functions.get(name))
            if not isinstance(spec, ToolSpec):
                return f"tool {name}: {spec.why if spec else 'its source cannot be found'}"
            specs[spec.name], declared[spec.name] = spec, declared_all[name]
        descriptions = {
            shown: graph.prompts.get(description_param(declared[shown]) or "", spec.description)
            for shown, spec in specs.items()
        }
        callables = {shown: graph.functions[f.name] for shown, f in declared.items() if f.name in graph.functions}
        timeouts = {shown: float(timeout(f)) for shown, f in declared.items()}
        return cls(specs, descriptions, callables, timeouts, declared)

    def offered(self) -> list[dict]:
        """The tools as OpenAI's `tools=` takes them."""
        return [spec.to_openai(self.descriptions[name]) for name, spec in self.specs.items()]

    async def run(self, call: ToolCall) -> ToolResult:
        """One call in its span (the GenAI conventions' execute_tool; arguments and result only where the user opted
        in to text in spans): its result as text, or (bounded) why it could not be made or what went wrong; never
        raised."""
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
        }
        with telemetry.span(f"execute_tool {call.name}", attributes) as span:
            if telemetry.content():
                span.set(
                    {
                        "gen_ai.tool.call.arguments": telemetry.capped(
                            json.dumps(dict(call.arguments), ensure_ascii=False, default=str)
                        )
                    }
                )
            result = await self.called(call)
            if result.error:
                span.fail("the tool call failed")
            if telemetry.content():
                span.set({"gen_ai.tool.call.result": telemetry.capped(result.content)})
            return result

    async def called(self, call: ToolCall) -> ToolResult:
        """One call, made: its result, or why it could not be."""
        problem = argument_problem(call, self.specs)
        if problem is not None:  # it may quote what the model sent: megabytes
            return ToolResult(call, bounded(problem), error=True)
        function = self.callables.get(call.name)
        if function is None:
            return ToolResult(call, f"{call.name} is not loaded (run the pipeline through sembp_dsl.load)", error=True)
        started, limit = time.monotonic(), self.timeouts[call.name]
        grace = getattr(function, "answer_grace", 0.0)  # a server's tool keeps to its timeout, and says why
        result, raised = await call_function(function, call.arguments, limit + grace)
        if isinstance(raised, Overran):
            return ToolResult(call, f"{call.name} took longer than its timeout of {limit:g}s", True, limit)
        seconds = time.monotonic() - started
        if isinstance(raised, ServerStopped):
            raise raised  # the run stops: its tools' server is gone
        if isinstance(raised, ToolFailed):
            return ToolResult(call, bounded(str(raised)), True, seconds)
        if raised is not None:
            return ToolResult(call, bounded(f"{call.name} raised {type(raised).__name__}: {raised}"), True, seconds)
        text = as_text(result)
        if text is None:
            return ToolResult(
                call, f"{call.name} returned a {type(result).__name__}, which has no text form", True, seconds
            )
        return ToolResult(call, bounded(text), False, seconds)


def timeout(function: ir.Function) -> float:
    setting = function.setting("timeout")
    return float(setting.value) if setting is not None and isinstance(setting.value, (int, float)) else DEFAULT_TIMEOUT


def as_text(value: object) -> str | None:
    """What a tool returned, as the model is shown it: text as it is, anything else as JSON; None: no text form."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return None
