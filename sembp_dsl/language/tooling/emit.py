"""Graph -> text for people and tools: IR as JSON, DOT, Mermaid, and every prompt rendered."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator

from .. import ir
from ..graph.graph import Graph, describe
from ..kinds import kind_of
from ..nodes.node import GraphNode
from ..nodes.outputs import fields_of
from ..nodes.templates import Record

# user:password@ in a URL setting (api_base = "http://me:secret@host/v1"): the password is masked, as in
# every other output; the user name stays, so the reader still sees which account is meant.
URL_PASSWORD = re.compile(r"(://[^/@:\s]*:)[^/@\s]+@")


def _plain(value):
    if isinstance(value, ir.Setting) and isinstance(value.value, str):
        value = dataclasses.replace(value, value=URL_PASSWORD.sub(r"\1***@", value.value))
    if dataclasses.is_dataclass(value):
        skip = {"text"} if isinstance(value, ir.Pipeline) else set()  # the whole source file
        return {
            f.name: _plain(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.name not in skip and not (f.metadata.get("optional") and getattr(value, f.name) == f.default)
        }
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def emit_ir(graph: Graph) -> str:
    """The IR as JSON, spans included, so editors and scripts can point into the source."""
    return json.dumps(_plain(graph.pipeline), indent=2, ensure_ascii=False)


def _node_label(graph: Graph, name: str) -> str:
    """`name: type`, and what it calls when not the forward model (its kind says): `judge: {verdict: ...}, model
    strong`, `passages: json, function search`."""
    node = graph.nodes.get(name)
    if node is None:
        return name
    label = kind_of(node).label(node)
    return label if node.each is None else f"{label}, for each {node.each.item} in {node.each.over}"


def _condition(node: GraphNode, pred: str) -> str | None:
    """`when triage == Yes` on an edge a condition gates (its conditions joined by `or`), else None."""
    conditions = [str(gate) for gate in node.gates if pred in gate.sources]
    return "when " + " or ".join(conditions) if conditions else None


def emit_dot(graph: Graph) -> str:
    lines = [f"digraph {json.dumps(graph.pipeline.name)} {{", "  rankdir=LR;", "  node [shape=box, style=rounded];"]
    for item in graph.inputs:
        lines.append(f"  {json.dumps(item.name)} [shape=ellipse];")
    for name in graph.nodes:
        extra = ", peripheries=2" if name in graph.outputs else ""
        lines.append(f"  {json.dumps(name)} [label={json.dumps(_node_label(graph, name))}{extra}];")
    for node in graph.nodes.values():
        for pred in node.inputs:
            condition = _condition(node, pred)
            label = f" [label={json.dumps(condition)}]" if condition else ""
            lines.append(f"  {json.dumps(pred)} -> {json.dumps(node.name)}{label};")
    lines.append("}")
    return "\n".join(lines)


def emit_mermaid(graph: Graph) -> str:
    """A Mermaid flowchart. Ids are generated (`n0`, `n1`, ...) and names appear only in quoted labels:
    a node called `end`, `style` or `class` is a keyword to Mermaid and would break the chart."""

    def quote(text: str) -> str:
        return '"' + text.replace('"', "#quot;") + '"'

    ids = {name: f"n{index}" for index, name in enumerate([*(i.name for i in graph.inputs), *graph.nodes])}
    lines = ["flowchart LR"]
    for item in graph.inputs:
        lines.append(f"  {ids[item.name]}([{quote(item.name)}])")
    for name in graph.nodes:
        shape = ("[[", "]]") if name in graph.outputs else ("[", "]")
        lines.append(f"  {ids[name]}{shape[0]}{quote(_node_label(graph, name))}{shape[1]}")
    for node in graph.nodes.values():
        for pred in node.inputs:
            condition = _condition(node, pred)
            arrow = f"-->|{quote(condition)}|" if condition else "-->"
            lines.append(f"  {ids[pred]} {arrow} {ids[node.name]}")
    return "\n".join(lines)


#: The most characters of prompts shown: a graph of 1,500 x 1,500 edges has 768 MB of them, more than
#: anyone reads (and 300 s to print); past it the sections end with one that says they were cut short.
MAX_PROMPT_CHARS = 16 * 2**20


def emit_prompts(graph: Graph) -> str:
    return "\n\n".join(prompt_sections(graph))


def prompt_sections(graph: Graph) -> Iterator[str]:
    """The prompts of `_sections`, up to MAX_PROMPT_CHARS of them, one section at a time (`sbpc compile`
    prints each as it is made)."""
    shown = 0
    for count, section in enumerate(_sections(graph)):
        if shown >= MAX_PROMPT_CHARS:
            yield (
                f"=== stopped after {count:,} sections, {shown / 2**20:.0f} MB: a graph this size has "
                "more prompts than anyone reads ==="
            )
            return
        shown += len(section)
        yield section


def _sections(graph: Graph) -> Iterator[str]:
    """Every prompt the method sends, rendered with `<name>` placeholders, one section at a time:
    each node's forward prompt and backward questions, the loss feedback, the optimizer's prompt for
    every trainable param, and how each trainable demos param is filled."""
    values: dict = {i.name: f"<{i.name}>" for i in graph.inputs} | {n: f"<output of {n}>" for n in graph.nodes}
    for name, node in graph.nodes.items():
        if node.each is not None:
            values[node.each.item] = f"<{node.each.item}>"
        if fields := fields_of(node.type):
            values[name] = Record({f.name: f"<{name}.{f.name}>" for f in fields}, values[name])
    for node in graph.nodes.values():
        yield from kind_of(node).sections(node, graph, values)
        if not node.hints:
            continue
        placeholders = (f"<output of {node.name}>", f"<feedback on {node.name}>")
        [(_, together)] = graph.backward_questions(node, values, *placeholders, sibling=True)
        yield f"=== {node.name}: backward (all {len(node.hints)} hints) ===\n{together}"
        for (hint,), alone in graph.backward_questions(node, values, *placeholders, sibling=False):
            yield f"=== {node.name}: backward, no sibling ({hint}) ===\n{alone}"
    loss = graph.render_builtin(
        "loss", node=graph.output, output="<output>", expected="<expected>", parse_error=None, reason=None, grade=None
    )
    yield f"=== {graph.output}: loss feedback ===\n{loss}"
    for metric in graph.metrics.values():
        if metric.kind == "judge":
            question = graph.judge_question(metric, values, f"<output of {graph.output}>", "<expected>")
            yield f"=== {metric.name}: judge (a record reply, {{reason, score}}) ===\n{question}"
    for param in graph.trainable:
        user = graph.users(param)[0]
        example = {
            "input": describe(user.inputs, values),
            "output": f"<output of {user.name}>",
            "gradient": "<gradient>",
        }
        optimizer = graph.optimizer_prompt(param, user.name, [example])
        yield f"=== {param}: optimizer ===\n{optimizer}"
    for name in graph.trainable_demos:
        spec = graph.demos[name]
        yield (
            f"=== {name}: demos of {spec.node} ===\nno prompt: the optimizer picks up to {spec.max} examples from the "
            f"training samples the pipeline answers right ({spec.node}'s inputs and answer on each)"
        )


EMITTERS = {"ir": emit_ir, "dot": emit_dot, "mermaid": emit_mermaid, "prompts": emit_prompts}
