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
import inspect
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ... import telemetry
from ...usercode import Overran, call_function
from .. import ir
from ..callables import beside, parse_target
from ..diagnostics import suggestion
from ..node import GraphNode
from ..signatures import ToolSpec, read_tool
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
from ..trace import FUNCTION_FAILED, NodeTrace, Shown
from .function import DEFAULT_TIMEOUT
from .kind import Checking, Compiled, Model, NodeKind
from .model import parse_reply, render

DEFAULT_MAX_STEPS = 4  # model calls one sample may make at a tool loop, unless it says `max_steps`
SHOWN_CALLS = 100  # the most calls `run --trace` lists of one sample (`show` and the report: compact's default)
NO_ANSWER = "no answer"  # the error of a sample whose model never answered within max_steps (scored wrong)


class ToolLoop(NodeKind):
    """A node whose model calls the declared functions its `tools` setting names, at most `max_steps` times."""

    name = "tools"
    marker = "tools"
    settings = {"tools": (tuple,), "max_steps": (int,)}
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
            function = cx.functions.get(name)
            if function is None:
                hint = suggestion(name, cx.functions) or f'declare it: function {name} = "module:{name}"'
                cx.report(
                    "E110", tools.value_span, f"node '{node.name}': tool '{name}' is not a declared function", help=hint
                )
                continue
            spec = tool_spec(cx.p, function, None)
            if isinstance(spec, str):
                cx.report(
                    "E112",
                    function.literal,
                    f"function '{name}' cannot be a tool: {spec}",
                    help="name each argument, with a type that has a JSON form (str, int, float, bool, list, dict)",
                )

    def functions(self, node: ir.Node) -> tuple[str, ...]:
        tools = node.setting("tools")
        return tools.value if tools is not None and isinstance(tools.value, tuple) else ()

    def bound_params(
        self, node: ir.Node, functions: Mapping[str, ir.Function], params: Mapping[str, ir.Param]
    ) -> tuple[str, ...]:
        """Its tools' descriptions that are params."""
        named = (description_param(functions.get(tool)) for tool in self.functions(node))
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
        loop = Loop(node, toolbox, model, model.takes_tools(node.model), *rendered)
        trace = await loop.run()
        telemetry.current().set({"sbpc.node.steps": len(steps_of(trace)) or None})  # the node's span
        return trace

    def instruction(self, node: GraphNode, graph: Compiled, values: Mapping[str, str]) -> str:
        """Its prompt, then each tool it may call with its description (a param's, when it is one)."""
        variables = node.variables(values, graph.prompts)
        described = {description_param(f) for f in graph.pipeline.functions}
        prompt = "\n\n".join(variables[name] for name in node.instructions if name not in described)
        toolbox = Toolbox.of(node, graph)
        if isinstance(toolbox, str):
            return prompt
        lines = [f"It may call these tools (at most {max_steps(node)} model replies, the last one answering):"]
        for name, spec in toolbox.specs.items():
            param = description_param(toolbox.declared[name])
            whose = f" [its description is the param {param}]" if param else ""
            lines.append(f"- {name}({', '.join(p.name for p in spec.params)}){whose}: {toolbox.descriptions[name]}")
        return f"{prompt}\n\n" + "\n".join(lines)

    def label(self, node: GraphNode) -> str:
        return f"{node.name}: {node.type}, tools {', '.join(tools_of(node))}"

    def sections(self, node: GraphNode, graph: Compiled, values: Mapping[str, str]) -> Iterator[str]:
        """Its forward prompt, and the tools as a model that calls them natively is offered them."""
        head = f"=== {node.name}: forward, calling tools (at most {max_steps(node)} model replies) ==="
        yield f"{head}\n{node.render(values, graph.prompts)}"
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


def tool_spec(pipeline: ir.Pipeline, function: ir.Function, bound: Callable | None) -> ToolSpec | str | None:
    """A declared function as a tool, read from its module's source without importing it: the module beside the
    pipeline, else (at run time) the file the bound callable came from. None: no source to read here (a module
    allowed by name, at check time)."""
    target = parse_target(function.target)
    if isinstance(target, str):
        return None  # E080 says why
    folder = os.path.dirname(os.path.abspath(pipeline.path)) if pipeline.path else ""
    place = beside(folder, target.module) if folder and os.path.isfile(pipeline.path) else None
    path = place.path if place is not None else None
    if path is None and bound is not None:
        try:
            path = inspect.getsourcefile(bound)
        except TypeError:  # `math:sqrt`: built into Python or compiled
            return "it has no Python source to read its signature from (a built-in or compiled function)"
    if path is None:
        return None
    try:
        return read_spec(path, os.stat(path).st_mtime_ns, target.attr, function.name)
    except OSError as exc:
        return f"its module cannot be read: {exc.strerror or exc}"


@functools.lru_cache(maxsize=256)
def read_spec(path: str, stamp: int, attr: str, name: str) -> ToolSpec | str:
    """A tool read from a file (once per version of it: `stamp`)."""
    with open(path, "rb") as file:  # bytes: read as Python reads a module (a BOM, a `coding:` line)
        return read_tool(file.read(), attr, shown_as=name)


@dataclass(frozen=True)
class Toolbox:
    """A node's tools as this run has them: each one's spec, description (its param's current text, else its
    docstring), callable and timeout."""

    specs: Mapping[str, ToolSpec]
    descriptions: Mapping[str, str]
    callables: Mapping[str, Callable]
    timeouts: Mapping[str, float]
    declared: Mapping[str, ir.Function]

    @classmethod
    def of(cls, node: GraphNode, graph: Compiled) -> Toolbox | str:
        """The node's tools, or why one cannot be offered."""
        declared = {f.name: f for f in graph.pipeline.functions if f.name in tools_of(node)}
        specs = {}
        for name in tools_of(node):
            spec = tool_spec(graph.pipeline, declared[name], graph.functions.get(name))
            if not isinstance(spec, ToolSpec):
                return f"tool {name}: {spec or 'its source cannot be found'}"
            specs[name] = spec
        descriptions = {
            name: graph.prompts.get(description_param(declared[name]) or "", spec.description)
            for name, spec in specs.items()
        }
        timeouts = {name: float(timeout(declared[name])) for name in specs}
        return cls(specs, descriptions, graph.functions, timeouts, declared)

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
        result, raised = await call_function(function, call.arguments, limit)
        if isinstance(raised, Overran):
            return ToolResult(call, f"{call.name} took longer than its timeout of {limit:g}s", True, limit)
        seconds = time.monotonic() - started
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
