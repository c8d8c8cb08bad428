"""The tool loop: a node whose model may call Python tools (`tools = [lookup, calc]`) until it answers.

Each turn the model either calls tools or answers. A model that calls tools natively gets them as OpenAI's
`tools=` (each one's JSON Schema read from its signature and docstring without importing it, signatures.py);
every other model, the embedded one included, is held to the text form (toolcalls.py): one JSON object a
reply, a call or the answer. The calls of one reply run concurrently, each within its function's `timeout`;
what a call returns, or why it could not be made or failed (bounded), goes back as that call's result. The
answer is read as the node's type, as a model call's reply is. No answer within `max_steps` model calls fails
the sample, saying so (scored wrong, not lost). The trajectory (each reply, its calls and their results) is
kept on the node's trace as its `steps` (NodeTrace.extra), shown to the backward model (`trajectory`), and
said in a few numbered lines by `shown`, which `run --trace`, `sbpc show` and the report print.

A tool's description may be a param (`function lookup = "tools:lookup" { description = lookup_doc }`): it is
part of the node's instruction, so the optimizer improves it like a prompt and write-back changes the .sbp.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ... import telemetry
from ...usercode import Overran, ServerStopped, ToolFailed, call_function
from .. import ir
from ..blocks.callables import parse_target
from ..diagnostics import suggestion
from ..mcp_servers import (
    Server,
    is_server_tool,
    lock_path,
    locked_tools,
    read_lock,
    servers,
    split,
    tool_function,
)
from ..mcp_servers import tool_spec as server_spec
from ..nodes.node import GraphNode
from ..nodes.outputs import answer_format
from ..nodes.trace import FUNCTION_FAILED, NodeTrace, Shown
from ..signatures import ToolSpec, module_functions, read_tool
from ..toolcalls import (
    Answer,
    Step,
    ToolCall,
    ToolResult,
    Turn,
    argument_problem,
    bounded,
    compact,
    describe_tools,
    kept_arguments,
    read_reply,
    reply_schema,
)
from .function import DEFAULT_TIMEOUT, source_of
from .kind import Checking, Compiled, Model, NodeKind
from .model import parse_reply, render, system_section

DEFAULT_MAX_STEPS = 4  # model calls one sample may make at a tool loop, unless it says `max_steps`
SHOWN_CALLS = 100  # the most calls `run --trace` lists of one sample (`show` and the report: compact's default)
NO_ANSWER = "no answer"  # the error of a sample whose model never answered within max_steps (scored wrong)


class ToolLoop(NodeKind):
    """A node whose model calls the declared functions its `tools` setting names, at most `max_steps` times."""

    name = "tools"
    marker = "tools"
    settings = {"tools": (tuple,), "max_steps": (int,)}
    help = {
        "tools": "declared functions the model may call, e.g. [lookup, calc]: each one's JSON Schema is read from "
        "its signature and docstring, never by importing it",
        "max_steps": f"the most model replies one sample makes, the last one answering (default {DEFAULT_MAX_STEPS})",
    }
    trace_keys = ("steps",)

    def check(self, cx: Checking, node: ir.Node) -> None:
        tools, steps = node.setting("tools"), node.setting("max_steps")
        if steps is not None and isinstance(steps.value, int) and not isinstance(steps.value, bool) and steps.value < 1:
            cx.report(
                "E111",
                steps.value_span,
                f"node '{node.name}': max_steps must be at least 1, not {steps.value}",
                help="max_steps counts the model's replies, the last of which answers",
            )
        if tools is None or not isinstance(tools.value, tuple):
            return
        for name in tools.value:
            if is_server_tool(name):
                check_server_tool(cx, node, name, tools.value_span)
                continue
            function = cx.functions.get(name)
            if function is None:
                hint = suggestion(name, cx.functions) or f'declare it: function {name} = "module:{name}"'
                cx.report(
                    "E110", tools.value_span, f"node '{node.name}': tool '{name}' is not a declared function", help=hint
                )
                continue
            spec = tool_spec(cx.p, function, None)
            if isinstance(spec, Unusable):
                cx.report("E112", function.literal, f"function '{name}' cannot be a tool: {spec.why}", help=spec.help)
            elif isinstance(spec, ToolSpec):
                warn_incomplete(cx, f"function '{name}'", function, spec)

    def functions(self, node: ir.Node) -> tuple[str, ...]:
        tools = node.setting("tools")
        return tools.value if tools is not None and isinstance(tools.value, tuple) else ()

    def bound_params(
        self, node: ir.Node, functions: Mapping[str, ir.Function], params: Mapping[str, ir.Param]
    ) -> tuple[str, ...]:
        """Its tools' descriptions that are params."""
        named = (description_param(functions.get(tool)) for tool in self.functions(node))  # servers' tools too
        return tuple(name for name in named if name is not None and name in params)

    def model_calls(self, node: GraphNode) -> int:
        return max_steps(node)

    async def forward(self, node: GraphNode, graph: Compiled, model: Model, values: Mapping[str, str]) -> NodeTrace:
        rendered = render(node, graph, values)
        if isinstance(rendered, NodeTrace):
            return rendered
        toolbox = Toolbox.of(node, graph)
        if isinstance(toolbox, str):
            return NodeTrace.without_reply(node.name, rendered[0], f"{FUNCTION_FAILED}: {toolbox}")
        prompt, system = rendered
        loop = Loop(node, toolbox, model, model.takes_tools(node.model), answering(node, prompt), system)
        trace = await loop.run()
        telemetry.current().set({"sbpc.node.steps": len(steps_of(trace)) or None})  # the node's span
        return trace

    def instruction(self, node: GraphNode, graph: Compiled, values: Mapping[str, str]) -> str:
        """Its prompt, then each tool it may call with its description (a param's, when it is one)."""
        variables = node.variables(values, graph.prompts)
        described = {description_param(f) for f in declared_tools(graph.pipeline).values()}
        prompt = "\n\n".join(variables[name] for name in node.instructions if name not in described)
        toolbox = Toolbox.of(node, graph)
        if isinstance(toolbox, str):
            return prompt
        lines = [f"It may call these tools (at most {max_steps(node)} model replies, the last one answering):"]
        for name, spec in toolbox.specs.items():
            param = description_param(toolbox.declared[name])
            whose = f" [its description is the param {param}]" if param else ""
            lines.append(
                f"- {toolbox.declared[name].name}({', '.join(p.name for p in spec.params)}){whose}: {toolbox.descriptions[name]}"
            )
        return f"{prompt}\n\n" + "\n".join(lines)

    def label(self, node: GraphNode) -> str:
        return f"{node.name}: {node.type}, tools {', '.join(tools_of(node))}"

    def sections(self, node: GraphNode, graph: Compiled, values: Mapping[str, str]) -> Iterator[str]:
        """Its system message (if any), its forward prompt, and the tools as a model that calls them natively is
        offered them."""
        yield from system_section(node, graph, values)
        head = f"=== {node.name}: forward, calling tools (at most {max_steps(node)} model replies) ==="
        yield f"{head}\n{answering(node, node.render(values, graph.prompts))}"
        toolbox = Toolbox.of(node, graph)
        offered = toolbox if isinstance(toolbox, str) else json.dumps(toolbox.offered(), indent=2, ensure_ascii=False)
        yield f"=== {node.name}: tools ===\n{offered}"

    def shown(self, extra: Mapping[str, Any], full: bool) -> Sequence[Shown]:
        """Its calls and their results, numbered, then the answer."""
        steps = [Step.from_json(step) for step in extra["steps"]]
        return [Shown("tool calls", compact(steps, limit=SHOWN_CALLS) if full else compact(steps))]

    def trajectory(self, trace: NodeTrace) -> str | None:
        """Its calls, so a gradient can name the call that went wrong."""
        steps = steps_of(trace)
        return f"Its tool calls, in order:\n{compact(steps)}" if steps else None


def answering(node: GraphNode, prompt: str) -> str:
    """The loop's first prompt, with the answer's type in words (a record's fields, a choice's options): no JSON
    Schema holds the answer of a tool loop. A node that reads its answer from a tag has said how in its template."""
    words = answer_format(node.type) if node.parse != "tag" else None
    return f"{prompt}\n\n{words}" if words else prompt


@dataclass(frozen=True)
class DescribedTool:
    """A tool a node may call whose description is a param: what the optimizer is shown of it."""

    name: str
    param: str
    arguments: Mapping[str, Any]  # its arguments' JSON Schema, as the model is offered it


def described_tools(node: GraphNode, graph: Compiled) -> tuple[DescribedTool, ...]:
    """The tools of a node whose descriptions are params, in the order it names them (none when a tool cannot be
    read: the forward pass says why)."""
    toolbox = Toolbox.of(node, graph) if tools_of(node) else None
    if not isinstance(toolbox, Toolbox):
        return ()
    named = {name: description_param(toolbox.declared[name]) for name in toolbox.specs}
    return tuple(
        DescribedTool(name, param, toolbox.specs[name].schema())
        for name, param in named.items()
        if param is not None and param in graph.prompts
    )


def calls_of(trace: NodeTrace, tool: str) -> list[tuple[ToolCall, ToolResult | None]]:
    """The calls a tool loop made of one tool on one sample, each with its result (None: not run)."""
    return [
        (call, result)
        for step in steps_of(trace)
        for call, result in zip(step.calls, (*step.results, *([None] * len(step.calls))))
        if call.name == tool
    ]


def steps_of(trace: NodeTrace) -> tuple[Step, ...]:
    """A tool loop's trajectory as its trace keeps it: each reply, its tool calls and their results."""
    return tuple(Step.from_json(step) for step in trace.extra.get("steps", ()))


def kept(steps: Sequence[Step]) -> Mapping[str, Any]:
    """A trajectory as the trace keeps it (NodeTrace.extra): none without a step."""
    return {"steps": [step.to_json() for step in steps]} if steps else {}


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


def server_tool_spec(pipeline: ir.Pipeline, name: str) -> ToolSpec | str:
    """A server's tool as the lock has it, or why it cannot be had."""
    server_name, tool = split(name)
    block = servers(pipeline).get(server_name)
    if block is None:
        return f"no MCP server '{server_name}' is declared"
    tools = locked_tools(cached_lock(lock_path(pipeline.path), lock_stamp(pipeline.path)), Server.of(block))
    if isinstance(tools, str):
        return tools
    if tool not in tools:
        return f"the MCP server '{server_name}' has no tool '{tool}' (as locked)"
    return server_spec(name, tools[tool])


@functools.lru_cache(maxsize=64)
def cached_lock(path: str, stamp: int) -> dict | None:
    return read_lock(path) if stamp else None


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


def lock_stamp(pipeline_path: str) -> int:
    try:
        return os.stat(lock_path(pipeline_path)).st_mtime_ns
    except OSError:
        return 0


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


@dataclass
class Loop:
    """One sample's conversation at a tool loop: the messages so far, the steps taken, and what they cost."""

    node: GraphNode
    toolbox: Toolbox
    model: Model
    native: bool  # the model calls tools natively; else it is held to the text form
    prompt: str
    system: str | None
    messages: list[dict] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    pending: Turn | None = None  # the turn whose calls run next

    def __post_init__(self) -> None:
        if not self.native:
            self.prompt = (
                f"{self.prompt}\n\n{describe_tools(list(self.toolbox.specs.values()), self.toolbox.descriptions)}"
            )
        self.messages = [*([{"role": "system", "content": self.system}] if self.system else [])]
        self.messages.append({"role": "user", "content": self.prompt})

    async def run(self) -> NodeTrace:
        started = time.monotonic()
        tools = self.toolbox.offered() if self.native else ()
        schema = None if self.native else reply_schema(list(self.toolbox.specs.values()))
        for left in reversed(range(max_steps(self.node))):
            turn = await self.model.converse(self.node.name, list(self.messages), tools, schema, self.node.model)
            if isinstance(turn, NodeTrace):  # the call failed for good: the sample is lost
                return replace(turn, prompt=self.prompt, system=self.system, extra=kept(self.steps))
            self.turns.append(turn)
            answer = self.answer(turn) if self.native or turn.calls else self.read(turn)
            if answer is not None:
                return self.trace(turn, answer, started)
            if left:
                await self.call_pending()
        if self.pending is not None and self.pending.calls:  # the calls of the last reply: recorded, never run
            self.steps.append(self.step(self.pending, ()))
        last = "still called a tool" if self.pending is not None and self.pending.calls else "was no answer"
        error = f"{NO_ANSWER} within max_steps = {max_steps(self.node)}: the model's last reply {last}"
        return self.trace(self.turns[-1], (None, error), started)

    def answer(self, turn: Turn) -> tuple[str | None, str | None] | None:
        """A native turn: the answer when it calls no tool (else its calls are run, and None)."""
        if not turn.calls:
            self.steps.append(self.step(turn, ()))
            return parse_reply(self.node, turn.text)
        self.messages.append(
            {
                "role": "assistant",
                "content": turn.text or None,
                "tool_calls": [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {
                            "name": c.name,
                            "arguments": json.dumps(kept_arguments(c.arguments), ensure_ascii=False),
                        },
                    }
                    for c in turn.calls
                ],
            }
        )
        self.pending = turn
        return None

    def read(self, turn: Turn) -> tuple[str | None, str | None] | None:
        """A turn in the text form: the answer, or the one call it makes (or why it is neither), then None."""
        said = read_reply(turn.text, self.toolbox.specs, len(self.steps) + 1)
        if isinstance(said, Answer):
            self.steps.append(self.step(turn, ()))
            return parse_reply(self.node, said.text)
        self.messages.append({"role": "assistant", "content": turn.text})
        self.pending = replace(turn, calls=(said,)) if isinstance(said, ToolCall) else turn
        if not isinstance(said, ToolCall):
            self.steps.append(self.step(turn, ()))
            self.messages.append({"role": "user", "content": said.why})
        return None

    def step(self, turn: Turn, results: Sequence[ToolResult]) -> Step:
        return Step(turn.text, turn.calls, tuple(results), turn.prompt_tokens, turn.completion_tokens)

    async def call_pending(self) -> None:
        """Run the pending turn's calls, all at once, and send each result back."""
        turn, self.pending = self.pending, None
        if turn is None or not turn.calls:
            return
        results = await asyncio.gather(*(self.toolbox.run(call) for call in turn.calls))
        self.model.count("tool steps", len(results))
        self.model.count("tool milliseconds", round(sum(r.seconds for r in results) * 1000))
        self.steps.append(self.step(turn, results))
        for result in results:
            if self.native:
                self.messages.append({"role": "tool", "tool_call_id": result.call.id, "content": result.content})
            else:
                self.messages.append({"role": "user", "content": f"Result of {result.call.name}: {result.content}"})

    def trace(self, last: Turn, parsed: tuple[str | None, str | None], started: float) -> NodeTrace:
        output, error = parsed
        if error is not None and not error.startswith(NO_ANSWER):
            self.model.count("forward parse failures")
        return NodeTrace(
            self.node.name,
            self.prompt,
            last.text,
            output,
            error,
            sum(t.prompt_tokens for t in self.turns),
            sum(t.completion_tokens for t in self.turns),
            time.monotonic() - started,
            all(t.cached for t in self.turns),
            cost=sum(t.cost for t in self.turns),
            system=self.system,
            cut_off=last.finish_reason == "length",
            extra=kept(self.steps),
        )
