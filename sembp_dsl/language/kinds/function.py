"""The function call: a node that calls a Python callable instead of a model (`function = search`).

It is called with its predecessors' values as keyword arguments (typed: a number as a number, JSON as what it
reads). What it raises, a timeout, or a return value its type cannot hold is that sample's failure: its
successors are not reached, and the sample is scored wrong (not lost: a step that made the function fail must
count against that step). Checking and compiling never import the callable; runtime/code.py binds it.
"""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Iterator, Mapping

from ...usercode import Overran, call_function
from .. import ir
from ..diagnostics import suggestion
from ..node import GraphNode
from ..shapes import output_text, python_value
from ..templates import unsendable
from ..trace import FUNCTION_FAILED, NodeTrace
from .kind import PROMPT_SETTINGS, Checking, Compiled, Model, NodeKind

DEFAULT_TIMEOUT = 60.0  # seconds a function node's call may take, unless it says `timeout`


class FunctionCall(NodeKind):
    """A node that calls the declared function its `function` setting names, within its `timeout`."""

    name = "function"
    marker = "function"
    settings = {"function": (str,), "timeout": (int, float)}  # it sends no prompt
    prompted = False

    def refuse(self, cx: Checking, node: ir.Node, setting: ir.Setting) -> None:
        if setting.key == "demos":
            cx.report(
                "E092",
                setting.span,
                f"node '{node.name}' calls a function, not a model: no prompt shows its demos",
                help="give the demos to the node that reads the function's output",
            )
        elif setting.key in PROMPT_SETTINGS:
            cx.report(
                "E082",
                setting.span,
                f"function node '{node.name}' makes no model call: it takes no '{setting.key}'",
                help="a function node takes `function` and `timeout`; its predecessors are its arguments",
            )
        else:
            super().refuse(cx, node, setting)

    def check(self, cx: Checking, node: ir.Node) -> None:
        function = node.setting("function")
        if function is not None and isinstance(function.value, str) and function.value not in cx.functions:
            hint = suggestion(function.value, cx.functions)
            cx.report("E081", function.value_span, f"undefined function '{function.value}'", help=hint)

    def functions(self, node: ir.Node) -> tuple[str, ...]:
        function = node.setting("function")
        return (str(function.value),) if function is not None else ()

    def model_calls(self, node: GraphNode) -> int:
        return 0

    async def forward(self, node: GraphNode, graph: Compiled, model: Model, values: Mapping[str, str]) -> NodeTrace:
        """Its callable on its predecessors' values, within its timeout; no model call."""
        name, timeout = called(node), time_allowed(node)
        arguments = {input: python_value(graph.type_of(input), values[input]) for input in node.inputs}
        shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in arguments.items())
        call = f"{name}({shown})"  # what the trace shows as this node's prompt
        function = graph.functions.get(name)
        if function is None:
            unloaded = f"{FUNCTION_FAILED}: '{name}' is not loaded (run the pipeline through sembp_dsl.load)"
            return NodeTrace.without_reply(node.name, call, unloaded)
        started = time.monotonic()
        output: str | None = None
        error: str | None = None
        result, raised = await call_function(function, arguments, timeout)
        if isinstance(raised, Overran):
            error = f"{FUNCTION_FAILED}: {name} {raised}"
        elif raised is not None:
            error = f"{FUNCTION_FAILED}: {name} raised {type(raised).__name__}: {raised}"
        else:
            output, problem = output_text(node.type, result)
            problem = problem or (unsendable(output) if output is not None else None)
            if problem is not None:
                output, error = None, f"{FUNCTION_FAILED}: what {name} returned {problem}"
        if error is not None:
            model.count("function failures")
        return NodeTrace(node.name, call, output or "", output, error, 0, 0, time.monotonic() - started, False)

    def instruction(self, node: GraphNode, graph: Compiled, values: Mapping[str, str]) -> str:
        """In place of an instruction: the function's name, what it calls, and its docstring."""
        name = called(node)
        target = next((f.target for f in graph.pipeline.functions if f.name == name), "")
        function = graph.functions.get(name)
        doc = (inspect.getdoc(function) or "") if function is not None else ""
        return (
            f"A Python function, {name} ({target}), called with the inputs below as keyword arguments. "
            "It is code: it cannot change, but what it is given can." + (f"\n\n{doc}" if doc else "")
        )

    def label(self, node: GraphNode) -> str:
        return f"{node.name}: {node.type}, function {called(node)}"

    def sections(self, node: GraphNode, graph: Compiled, values: Mapping[str, str]) -> Iterator[str]:
        arguments = ", ".join(f"{name}=<{name}>" for name in node.inputs)
        yield f"=== {node.name}: calls the function {called(node)}({arguments}), no model ==="


def called(node: GraphNode) -> str:
    """The declared name of the function a function node calls."""
    return str(node.settings["function"])


def time_allowed(node: GraphNode) -> float:
    """Seconds its call may take."""
    value = node.settings.get("timeout", DEFAULT_TIMEOUT)
    return float(value) if isinstance(value, (int, float)) else DEFAULT_TIMEOUT  # the checker holds it a number
