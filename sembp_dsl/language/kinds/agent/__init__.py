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

The kind is this package: the kind itself here, its tools in toolbox.py (read, checked, called), one sample's
conversation in loop.py (typed messages, language/messages.py, asked through `Model.ask`), the text form and
the trajectory in toolcalls.py, and the codes only its checks report in codes.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .... import telemetry
from ... import ir
from ...diagnostics import suggestion
from ...mcp_servers import is_server_tool
from ...nodes.node import GraphNode
from ...nodes.outputs import answer_format
from ...nodes.trace import FUNCTION_FAILED, NodeTrace, Shown
from ...signatures import ToolSpec
from ..kind import Checking, Compiled, Model, NodeKind
from ..model import render, system_section
from .codes import CODES
from .loop import Loop
from .toolbox import (
    DEFAULT_MAX_STEPS,
    Toolbox,
    Unusable,
    check_server_tool,
    declared_tools,
    description_param,
    max_steps,
    tool_spec,
    tools_of,
    warn_incomplete,
)
from .toolcalls import Step, ToolCall, ToolResult, compact

SHOWN_CALLS = 100  # the most calls `run --trace` lists of one sample (`show` and the report: compact's default)


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
    codes = CODES

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
        loop = Loop(node, toolbox, model, model.capabilities(node.model).tools, answering(node, prompt), system)
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
