"""The function call: a node that calls a Python callable instead of a model (`function = search`).

It is called with its predecessors' values as keyword arguments (typed: a number as a number, JSON as what it
reads). What it raises, a timeout, or a return value its type cannot hold is that sample's failure: its
successors are not reached, and the sample is scored wrong (not lost: a step that made the function fail must
count against that step). Checking and compiling never import the callable; runtime/code.py binds it.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping

from ...usercode import Overran, call_function
from .. import ir
from ..blocks.callables import beside, parse_target
from ..codes.code import Code
from ..diagnostics import suggestion
from ..nodes.node import GraphNode
from ..nodes.outputs import output_text, python_value
from ..nodes.templates import unsendable
from ..nodes.trace import FUNCTION_FAILED, NodeTrace
from ..signatures import Accepted, read_accepted
from .kind import PROMPT_SETTINGS, Checking, Compiled, Model, NodeKind

DEFAULT_TIMEOUT = 60.0  # seconds a function node's call may take, unless it says `timeout`
CODES = (  # the codes only its own checks report (the checker's and the runtime's E080, E083-E084: codes/nodes.py)
    Code(
        "E081",
        "undefined function",
        'A node\'s `function` names a `function NAME = "module:name"` declaration of the pipeline.',
        'function search = "tools:search"\nnode passages: json { function = serach }',
        'function search = "tools:search"\nnode passages: json { function = search }',
    ),
    Code(
        "E082",
        "a function node with a model's settings",
        "A function node calls Python code with its predecessors as keyword arguments: it sends no prompt,\n"
        "so it takes no `prompt`, `template`, `system`, `parse` or `model`. It takes `timeout` (seconds).",
        "node passages: json { function = search  prompt = p }",
        "node passages: json { function = search  timeout = 10 }",
    ),
    Code(
        "E141",
        "a function node given an input its function does not take",
        "A function node calls its function with each input as a keyword argument (a map's item by the map's\n"
        "name for it). An input the signature does not name would fail every call, so it is refused before\n"
        "any: add the parameter, or stop feeding the input. A branch's deciding node is the exception: it\n"
        "must feed the branch, and is passed only when the function takes it. The module beside the\n"
        "pipeline is read, never imported.",
        "def lookup(order_id): ...\n\nkind, order_id -> facts",
        "def lookup(order_id, kind): ...\n\nkind, order_id -> facts",
    ),
    Code(
        "E142",
        "a function node's parameter that nothing feeds",
        "Each parameter of a function node's function without a default needs an input of that name (or the\n"
        "map's item): the call would fail on every sample without it.",
        "def lookup(order_id, fact): ...\n\norder_id -> facts",
        'def lookup(order_id, fact="status"): ...\n\norder_id -> facts',
    ),
)


class FunctionCall(NodeKind):
    """A node that calls the declared function its `function` setting names, within its `timeout`."""

    name = "function"
    marker = "function"
    settings = {"function": (str,), "timeout": (int, float)}  # it sends no prompt
    help = {
        "function": "a declared function: the node calls it (its inputs as keyword arguments) instead of a model",
        "timeout": "seconds its call may take (default 60); past it, the sample's failure",
    }
    prompted = False
    codes = CODES

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
        elif function is not None and isinstance(function.value, str):
            check_arguments(cx, node, cx.functions[function.value])

    def functions(self, node: ir.Node) -> tuple[str, ...]:
        function = node.setting("function")
        return (str(function.value),) if function is not None else ()

    def model_calls(self, node: GraphNode) -> int:
        return 0

    async def forward(self, node: GraphNode, graph: Compiled, model: Model, values: Mapping[str, str]) -> NodeTrace:
        """Its callable on its predecessors' values, within its timeout; no model call."""
        name, timeout = called(node), time_allowed(node)
        function = graph.functions.get(name)
        arguments = passed(node, graph, values, function)
        shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in arguments.items())
        call = f"{name}({shown})"  # what the trace shows as this node's prompt
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


def passed(node: GraphNode, graph: Compiled, values: Mapping[str, str], function: Callable | None) -> dict:
    """Its keyword arguments, each typed: every input by its name, but a mapped node's list as the item of this
    run (by the map's name for it), and a branch's deciding node only when the function takes it (the branch
    needs it as a source; the function may not)."""
    each, deciders = node.each, {gate.subject for gate in node.gates}
    taken = takes(function)
    arguments = {}
    for name in node.inputs:
        if name in deciders and taken is not None and name not in taken:
            continue
        if each is not None and name == each.over:
            type_ = graph.type_of(name)
            arguments[each.item] = python_value(type_.item or type_, values[each.item])
        else:
            arguments[name] = python_value(graph.type_of(name), values[name])
    return arguments


def takes(function: Callable | None) -> frozenset[str] | None:
    """The keywords a callable takes; None when it takes any (or its signature cannot be read)."""
    try:
        parameters = inspect.signature(function).parameters.values() if function is not None else None
    except (TypeError, ValueError):
        return None
    if parameters is None or any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return frozenset(p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def check_arguments(cx: Checking, node: ir.Node, function: ir.Function) -> None:
    """What feeds a function node against what its callable takes, read from its source beside the pipeline:
    an input it does not take (E141; a branch's deciding node is not passed then), a parameter nothing gives
    (E142). A module not beside the pipeline is not read here (runtime/code.py binds it)."""
    accepted = accepted_of(cx.p, function)
    if accepted is None:
        return
    fed: dict[str, ir.Span] = {}
    deciders: set[str] = set()
    for edge in cx.p.edges:
        if any(target.name == node.name for target in edge.targets):
            fed.update({ref.name: ref.span for ref in edge.sources if ref.name not in fed})
            deciders |= {edge.condition.subject.name} if edge.condition is not None else set()
    if node.each is not None and node.each.over.name in fed:
        fed[node.each.item.name] = fed.pop(node.each.over.name)
    for name, span in fed.items():
        if name not in accepted.names and not accepted.any_keyword and name not in deciders:
            cx.report(
                "E141",
                span,
                f"function node '{node.name}' is given '{name}', which {function.name}{accepted} does not take",
                help=f"add a parameter '{name}' to {function.target}, or stop feeding it to '{node.name}'",
            )
    setting = node.setting("function")
    for name in accepted.required:
        if name not in fed:
            cx.report(
                "E142",
                setting.value_span if setting is not None else node.span,
                f"function node '{node.name}': {function.name}{accepted} needs '{name}', which nothing feeds it",
                help=f"feed it: `{name} -> {node.name}`, or give the parameter a default in {function.target}",
            )


def accepted_of(pipeline: ir.Pipeline, function: ir.Function) -> Accepted | None:
    """What a declared function takes, read (never imported) from its module beside the pipeline."""
    target, path = parse_target(function.target), source_of(pipeline, function, None)
    if path is None or isinstance(target, str):
        return None
    try:
        return read_source_accepted(path, os.stat(path).st_mtime_ns, target.attr)
    except OSError:
        return None  # the module's place is source.diagnose's to report


@functools.lru_cache(maxsize=256)
def read_source_accepted(path: str, stamp: int, attr: str) -> Accepted | None:
    with open(path, "rb") as file:  # bytes: read as Python reads a module (a BOM, a `coding:` line)
        return read_accepted(file.read(), attr)


def source_of(pipeline: ir.Pipeline, function: ir.Function, bound: Callable | None) -> str | None:
    """The file a declared function's source is read from, never imported: its module beside the pipeline, else
    (at run time) the file the bound callable came from. None: no source to read (a module allowed by name, at
    check time)."""
    target = parse_target(function.target)
    if isinstance(target, str):
        return None  # E080 says why
    folder = os.path.dirname(os.path.abspath(pipeline.path)) if pipeline.path else ""
    place = beside(folder, target.module) if folder and os.path.isfile(pipeline.path) else None
    path = place.path if place is not None else None
    if path is None and bound is not None:
        try:
            path = inspect.getsourcefile(bound)
        except TypeError:  # a builtin: no source
            return None
    return path


def called(node: GraphNode) -> str:
    """The declared name of the function a function node calls."""
    return str(node.settings["function"])


def time_allowed(node: GraphNode) -> float:
    """Seconds its call may take."""
    value = node.settings.get("timeout", DEFAULT_TIMEOUT)
    return float(value) if isinstance(value, (int, float)) else DEFAULT_TIMEOUT  # the checker holds it a number
