"""The model call, the default kind: a node renders its prompt, calls a model once, and reads the reply as its
type. A reply that cannot be read is recorded on the trace and scored wrong; it never stops a run."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import replace

from jinja2 import TemplateError

from .. import ir
from ..messages import Ask, Turn, prompted
from ..nodes.node import GraphNode
from ..nodes.outputs import describe, node_shape, output_kind
from ..nodes.trace import NOT_RENDERED, NodeTrace
from .kind import Checking, Compiled, Model, NodeKind

TAG = re.compile(r"<output>(.*?)(?:</output>|\Z)", re.S | re.I)
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
        if output_kind(node.type).described and not model.capabilities(node.model).holds(shape):
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
        if output_kind(node.type).described:
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
    return output_kind(node.type).parse(node.type, text.strip())
