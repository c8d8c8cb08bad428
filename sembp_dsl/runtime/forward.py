"""Executable graph + inputs -> run trace. The forward pass.

Every node of a sample is a task that awaits the tasks of its predecessors, so a
node starts the moment its inputs are ready; many samples run at once and the
LLM layer's semaphore bounds the calls in flight. A reply that cannot be parsed is
recorded on the trace and scored wrong; it never stops a run.

A function node calls its Python callable instead of a model, with its predecessors' values as keyword
arguments (typed: a number as a number, JSON as what it reads). What it raises, a timeout, or a return value
its type cannot hold is that sample's failure: its successors are not reached, and the sample is scored wrong
(not lost: a step that made the function fail must count against that step).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from jinja2 import TemplateError

from ..language.graph import Graph, GraphNode
from ..language.metrics import parse_number
from ..language.shapes import describe, first_json, node_shape, output_text, python_value, read_record
from ..models.faults import Failure
from ..models.llm import LLM, CallFailed
from .tasks import together

TAG = re.compile(r"<output>(.*?)(?:</output>|\Z)", re.S | re.I)
CALL_FAILED, NOT_RUN, NOT_RENDERED = "call failed", "not run", "template failed"
FUNCTION_FAILED, NOT_REACHED = "function failed", "not reached"  # a sample's failure, scored wrong (not lost)
PARSE_ERROR = "parse error"  # any other error: a reply that could not be read as the node's type
# "**Final answer:** ", "Answer is ", "# Verdict - ": a label before the answer, with its markdown.
LEADING_LABEL = re.compile(
    r"^[\s*_#>`]*(?:(?:the\s+)?(?:final\s+)?(?:answer|output|label|verdict)\s*(?:is)?\s*[:\-]?[\s*_`]*)?", re.I
)
WRAPPERS = re.compile(r"^[\s\"'`*_\u201c\u2018]+")  # quotes and emphasis around an answer carry no meaning
OUTER_PUNCTUATION = re.compile(r"^[\W_]+|[\W_]+$")
NEGATIVE = re.compile(r"-\s*\d")
# What may not follow an option for the reply to start with it: a letter or digit ("Yesterday" is not
# "Yes"), or a decimal part ("1.5" is not the option 1, though "1." ends a sentence).
NOT_AN_END = r"(?:\w|[.,]\d)"


@dataclass(frozen=True)
class NodeTrace:
    node: str
    prompt: str
    reply: str
    output: str | None  # parsed; None when the reply could not be parsed
    error: str | None  # why not
    prompt_tokens: int
    completion_tokens: int
    latency: float
    cached: bool
    failure: Failure | None = None  # why the call failed (status, endpoint, the provider's words), if it did
    cost: float = 0.0  # dollars, by the price table (0 from the cache, or when the model has no price)
    system: str | None = None  # the system message sent before the prompt, if any
    cut_off: bool = False  # the reply ended at a length limit (max_tokens, or its grammar's bound), not by itself

    @classmethod
    def without_reply(cls, node: str, prompt: str, reason: str, failure: Failure | None = None) -> NodeTrace:
        return cls(node, prompt, "", None, reason, 0, 0, 0.0, False, failure)

    def to_json(self) -> dict:
        return {**vars(self), "failure": self.failure.to_json() if self.failure else None}

    @property
    def lost(self) -> bool:
        """No reply at all: the call failed for good, the prompt did not render, or a predecessor was lost."""
        return self.error is not None and self.error.startswith((CALL_FAILED, NOT_RUN, NOT_RENDERED))

    @property
    def cause(self) -> str | None:
        """What failed, by the words its error opens with (a call, a template, a function, a predecessor), else a
        reply that could not be read as the node's type; None without an error."""
        if self.error is None:
            return None
        causes = (CALL_FAILED, NOT_RUN, NOT_RENDERED, FUNCTION_FAILED, NOT_REACHED)
        return next((cause for cause in causes if self.error.startswith(cause)), PARSE_ERROR)

    @property
    def blocked(self) -> bool:
        """No value for successors: a function failed, or this node was not reached because one did."""
        return self.output is None and self.error is not None and self.error.startswith((FUNCTION_FAILED, NOT_REACHED))

    @property
    def value(self) -> str:
        """What successors are shown: the parsed output, or the raw reply when parsing failed."""
        return self.output if self.output is not None else self.reply


@dataclass(frozen=True)
class Trace:
    inputs: Mapping[str, str]
    nodes: Mapping[str, NodeTrace]  # in topological order
    output_node: str
    output_field: str | None = None  # the field scored, of a record output

    @property
    def final(self) -> NodeTrace:
        return self.nodes[self.output_node]

    @property
    def output(self) -> str | None:
        """The answer scored: the output node's, or its field's (as text: a JSON value that is not a string
        as JSON)."""
        output = self.final.output
        if output is None or self.output_field is None:
            return output
        value = json.loads(output)[self.output_field]
        return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)

    @property
    def values(self) -> dict[str, str]:
        """Every input and node value, as successors saw them."""
        return {**self.inputs, **{name: t.value for name, t in self.nodes.items()}}

    def to_json(self) -> dict:
        return {
            "inputs": dict(self.inputs),
            "output": self.output,
            "nodes": {name: t.to_json() for name, t in self.nodes.items()},
        }


def shown(node: GraphNode, trace: NodeTrace) -> str:
    """A node's output as backward and optimizer models are shown it: the whole reply (reasoning included),
    but a record as read from the reply, when it could be."""
    if node.type.kind == "record" and trace.output is not None:
        return trace.output
    if trace.blocked:
        return f"(no output: {trace.error})"
    return trace.reply.strip()


def parse_reply(node: GraphNode, reply: str) -> tuple[str | None, str | None]:
    """The typed output in a reply, or (None, reason)."""
    text = reply
    if node.parse == "tag":
        match = TAG.search(reply)
        if match is None:
            return None, "no <output> tag in the reply"
        text = match.group(1)
    text = text.strip()
    if node.type.kind == "text":
        return text, None
    if node.type.kind == "record":
        return read_record(node.type, text)
    if node.type.kind == "json":
        value = first_json(text)
        if value is None:
            return None, "no JSON value in the reply"
        return json.dumps(value, ensure_ascii=False, sort_keys=True), None
    if node.type.kind == "number":
        number = parse_number(text)
        if number is None:
            return None, "no number in the reply"
        return (str(int(number)) if number == int(number) else repr(number)), None
    choice = match_choice(node.type.choices, text)
    if choice is None:
        return None, f"the reply does not start with one of {', '.join(node.type.choices)}"
    return choice, None


def match_choice(choices: tuple[str, ...], reply: str) -> str | None:
    """The option a reply starts with, after a label such as "Answer:" or "The answer is".

    The paper's form is the option first, then a reason; a label before it is common and harmless, so it
    is skipped. A number with a decimal part is a different number: "1.5" is neither 1 nor 2.

    Options are matched as written first, longest first, so `(A)` matches "(A) because..." and
    `-1` is not read as `1`; only then without their outer punctuation, so "A" still counts for
    `(A)` and "Yes." for `Yes`.
    """
    head = WRAPPERS.sub("", LEADING_LABEL.sub("", reply, count=1)).casefold()
    for choice in sorted(choices, key=len, reverse=True):
        option = choice.casefold()
        if head.startswith(option) and not (option[-1:].isalnum() and re.match(NOT_AN_END, head[len(option) :])):
            return choice
    if NEGATIVE.match(head):  # a negative number is not its absolute value
        return None
    bare = OUTER_PUNCTUATION.sub("", head.split("\n", 1)[0])
    for choice in sorted(choices, key=len, reverse=True):
        option = OUTER_PUNCTUATION.sub("", choice.casefold())
        if option and choice[:1] not in "+-" and re.match(re.escape(option) + f"(?!{NOT_AN_END})", bare):
            return choice
    return None


async def run_node(graph: Graph, llm: LLM, node: GraphNode, values: Mapping[str, str]) -> NodeTrace:
    try:
        prompt = node.render(values, graph.prompts)
        system = node.system_message(values, graph.prompts)
    except TemplateError as exc:  # this sample's values break the template: this sample fails, the run goes on
        line = getattr(exc, "lineno", None)
        return NodeTrace.without_reply(
            node.name, "", f"{NOT_RENDERED}: {exc}" + (f" (template line {line})" if line else "")
        )
    shape = node_shape(node.type, node.parse)
    if node.type.kind == "record" and (shape is None or not llm.takes_schema(node.model, shape)):
        prompt = f"{prompt}\n\n{describe(node.type)}"  # no JSON Schema reaches the model: the fields in words
    try:
        completion = await llm.complete("forward", prompt, shape, model=node.model, system=system)
    except CallFailed as exc:  # retries exhausted: this sample fails, the run goes on
        return NodeTrace.without_reply(node.name, prompt, f"{CALL_FAILED}: {exc}", exc.failure)
    output, error = parse_reply(node, completion.text)
    if error is not None:
        llm.ledger.count("forward parse failures")
    return NodeTrace(
        node.name,
        prompt,
        completion.text,
        output,
        error,
        completion.prompt_tokens,
        completion.completion_tokens,
        completion.latency,
        completion.cached,
        cost=completion.cost,
        system=system,
        cut_off=completion.finish_reason == "length",
    )


async def run_function(graph: Graph, llm: LLM, node: GraphNode, values: Mapping[str, str]) -> NodeTrace:
    """A function node: its callable on its predecessors' values, within its timeout; no model call."""
    arguments = {name: python_value(graph.type_of(name), values[name]) for name in node.inputs}
    shown = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in arguments.items())
    call = f"{node.function}({shown})"  # what the trace shows as this node's prompt
    function = graph.functions.get(node.function or "")
    if function is None:
        unloaded = f"{FUNCTION_FAILED}: '{node.function}' is not loaded (run the pipeline through sembp_dsl.load)"
        return NodeTrace.without_reply(node.name, call, unloaded)
    started = time.monotonic()
    output: str | None = None
    error: str | None = None
    try:
        result, raised = await asyncio.wait_for(call_function(function, arguments), node.timeout)
    except asyncio.TimeoutError:  # an async function is cancelled; a sync one runs on in its thread, unheard
        error = f"{FUNCTION_FAILED}: {node.function} took longer than its timeout of {node.timeout:g}s"
    else:
        if raised is not None:
            error = f"{FUNCTION_FAILED}: {node.function} raised {type(raised).__name__}: {raised}"
        else:
            output, problem = output_text(node.type, result)
            if problem is not None:
                error = f"{FUNCTION_FAILED}: what {node.function} returned {problem}"
    if error is not None:
        llm.ledger.count("function failures")
    return NodeTrace(node.name, call, output or "", output, error, 0, 0, time.monotonic() - started, False)


async def call_function(function: Callable, arguments: Mapping[str, object]) -> tuple[object, BaseException | None]:
    """What a callable returned, or what it raised: an async one is awaited on the loop, a sync one runs in a
    thread, so a slow one holds up no other sample. sys.exit() in it is that call's failure, not the run's end."""
    try:
        if inspect.iscoroutinefunction(function):  # others that return an awaitable are awaited below
            return await function(**arguments), None
        result = await asyncio.to_thread(function, **arguments)
        return (await result if inspect.isawaitable(result) else result), None
    except (Exception, SystemExit) as exc:
        return None, exc


async def run(graph: Graph, llm: LLM, inputs: Mapping[str, str]) -> Trace:
    """Run one sample through the graph."""
    tasks: dict[str, asyncio.Task] = {}

    async def start(node: GraphNode) -> NodeTrace:
        done = await asyncio.gather(*(tasks[h] for h in node.hints))
        lost = [t for t in done if t.lost]
        if lost:  # the cause travels on, so the output node says why its sample was lost
            return NodeTrace.without_reply(
                node.name,
                "",
                f"{NOT_RUN}: a predecessor's call failed",
                next((t.failure for t in lost if t.failure), None),
            )
        blocked = next((t for t in done if t.blocked), None)
        if blocked is not None:  # a function failed before it: no value to run on, and the sample is wrong
            cause = blocked.error or ""
            return NodeTrace.without_reply(
                node.name, "", cause if cause.startswith(NOT_REACHED) else f"{NOT_REACHED}: {cause}"
            )
        values = {**inputs, **{t.node: t.value for t in done}}
        if node.function is not None:
            return await run_function(graph, llm, node, values)
        return await run_node(graph, llm, node, values)

    for node in graph.nodes.values():  # topological order: predecessors' tasks already exist
        tasks[node.name] = asyncio.ensure_future(start(node))
    traces = await together(tasks.values())
    return Trace(dict(inputs), {t.node: t for t in traces}, graph.output, graph.output_field)
