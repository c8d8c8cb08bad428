"""The model call, the default kind: a node renders its prompt, calls a model once, and reads the reply as its
type. A reply that cannot be read is recorded on the trace and scored wrong; it never stops a run."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace

from jinja2 import TemplateError

from .. import ir
from ..messages import Ask, Turn, prompted
from ..nodes.metrics import parse_number
from ..nodes.node import GraphNode
from ..nodes.shapes import describe, first_json, node_shape, read_list, read_record
from ..nodes.trace import NOT_RENDERED, NodeTrace
from .kind import Checking, Compiled, Model, NodeKind

TAG = re.compile(r"<output>(.*?)(?:</output>|\Z)", re.S | re.I)
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
# The output types a prompt describes in words to a model that no JSON Schema holds to them.
DESCRIBED = ("record", "list")
# Why a model call takes no setting another kind takes, by the setting.
NOT_A_MODEL_CALLS = {"timeout": "only a function node has a timeout; a model's goes in its model block"}


class ModelCall(NodeKind):
    """A node that sends its rendered prompt to a model (its `model`, else the forward role) and parses the reply."""

    name = "model"

    def refuse(self, cx: Checking, node: ir.Node, setting: ir.Setting) -> None:
        help = NOT_A_MODEL_CALLS.get(setting.key, "")
        cx.report("E030", setting.span, f"unknown setting '{setting.key}' in node '{node.name}'", help=help)

    def model_calls(self, node: GraphNode) -> int:
        return 1

    async def forward(self, node: GraphNode, graph: Compiled, model: Model, values: Mapping[str, str]) -> NodeTrace:
        rendered = render(node, graph, values)
        if isinstance(rendered, NodeTrace):
            return rendered
        prompt, system = rendered
        shape = node_shape(node.type, node.parse)
        if node.type.kind in DESCRIBED and not model.capabilities(node.model).holds(shape):
            prompt = f"{prompt}\n\n{describe(node.type)}"  # no JSON Schema reaches the model: its type in words
        turn = await model.ask(node.name, Ask(prompted(prompt, system), shape), node.model)
        if isinstance(turn, NodeTrace):  # the call failed for good: the sample is lost
            return replace(turn, prompt=prompt)
        output, error = parse_reply(node, turn.text)
        if error is not None:
            model.count("forward parse failures")
        return answered(node.name, prompt, system, turn, output, error)

    def instruction(self, node: GraphNode, graph: Compiled, values: Mapping[str, str]) -> str:
        return node.instruction(values, graph.prompts)

    def label(self, node: GraphNode) -> str:
        return f"{node.name}: {node.type}" + (f", model {node.model}" if node.model != "forward" else "")

    def sections(self, node: GraphNode, graph: Compiled, values: Mapping[str, str]) -> Iterator[str]:
        """Its system message (if any) and forward prompt."""
        yield from system_section(node, graph, values)
        forward = node.render(values, graph.prompts)
        if node.type.kind in DESCRIBED:
            yield (
                f"=== {node.name}: forward (its last paragraph is sent only to a model that takes no JSON Schema) ===\n"
                f"{forward}\n\n{describe(node.type)}"
            )
        else:
            yield f"=== {node.name}: forward ===\n{forward}"


def answered(
    node: str, prompt: str, system: str | None, turn: Turn, output: str | None, error: str | None
) -> NodeTrace:
    """A node's trace of one model reply, read as `output` (or not, and why: `error`)."""
    return NodeTrace(
        node,
        prompt,
        turn.text,
        output,
        error,
        turn.prompt_tokens,
        turn.completion_tokens,
        turn.latency,
        turn.cached,
        cost=turn.cost,
        system=system,
        cut_off=turn.finish_reason == "length",
    )


def render(node: GraphNode, graph: Compiled, values: Mapping[str, str]) -> tuple[str, str | None] | NodeTrace:
    """A node's forward prompt and system message, or the lost trace of a sample whose values break its template
    (this sample fails, the run goes on)."""
    try:
        return node.render(values, graph.prompts), node.system_message(values, graph.prompts)
    except TemplateError as exc:
        line = getattr(exc, "lineno", None)
        return NodeTrace.without_reply(
            node.name, "", f"{NOT_RENDERED}: {exc}" + (f" (template line {line})" if line else "")
        )


def system_section(node: GraphNode, graph: Compiled, values: Mapping[str, str]) -> Iterator[str]:
    """A node's system message as `--emit prompts` shows it, when it has one."""
    system = node.system_message(values, graph.prompts)
    if system is not None:
        yield f"=== {node.name}: system message ===\n{system}"


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
    if node.type.kind == "list":
        return read_list(node.type, text)
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
