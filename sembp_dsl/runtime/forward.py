"""Executable graph + inputs -> run trace. The forward pass.

Every node of a sample is a task that awaits the tasks of its predecessors, so a
node starts the moment its inputs are ready; many samples run at once and the
LLM layer's semaphore bounds the calls in flight. The node itself is its kind's to
run (language/kinds): here is only when it runs, and what it is given.

A predecessor that was lost (its call failed for good) loses its successors too; one
that failed as a sample's failure (a function that raised) leaves them not reached,
and the sample is scored wrong.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import replace

from .. import telemetry
from ..language.graph.graph import Graph
from ..language.kinds import kind_of
from ..language.messages import Ask, Capabilities, Turn
from ..language.nodes.branches import record_value, runs
from ..language.nodes.maps import items
from ..language.nodes.node import GraphNode
from ..language.nodes.outputs import fields_of, python_value
from ..language.nodes.trace import CALL_FAILED, NOT_REACHED, NOT_RUN, NodeTrace, Trace
from ..models.llm import LLM, CallFailed
from .tasks import together


class Calls:
    """The model calls a node's kind makes (language/kinds' Model), over the LLM layer: a call that fails for
    good after its retries is a lost trace, so that sample fails and the run goes on."""

    def __init__(self, llm: LLM):
        self.llm = llm

    async def ask(self, node: str, ask: Ask, model: str) -> Turn | NodeTrace:
        try:
            return await self.llm.ask("forward", ask, model=model)
        except CallFailed as exc:  # retries exhausted: this sample fails, the run goes on
            return NodeTrace.without_reply(node, "", f"{CALL_FAILED}: {exc}", exc.failure)

    def capabilities(self, model: str) -> Capabilities:
        return self.llm.capabilities(model)

    def count(self, event: str, n: int = 1) -> None:
        self.llm.ledger.count(event, n)


def shown(node: GraphNode, trace: NodeTrace) -> str:
    """A node's output as backward and optimizer models are shown it: the whole reply (reasoning included),
    but a record as read from the reply, when it could be."""
    if fields_of(node.type) and trace.output is not None:
        return trace.output
    if trace.blocked:
        return f"(no output: {trace.error})"
    how = kind_of(node).trajectory(trace)  # a tool loop's calls, so a gradient can name the one that went wrong
    return trace.reply.strip() if how is None else f"{trace.reply.strip()}\n\n{how}"


async def run(graph: Graph, llm: LLM, inputs: Mapping[str, str]) -> Trace:
    """Run one sample through the graph."""
    tasks: dict[str, asyncio.Task] = {}
    calls = Calls(llm)

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
        if not taken(node, inputs, {t.node: t for t in done}):
            return NodeTrace.not_taken(node.name)
        return await ran(node, graph, calls, {**inputs, **{t.node: t.value for t in done}})

    with telemetry.span("forward", {"sbpc.pipeline": graph.pipeline.name}) as span:
        for node in graph.nodes.values():  # topological order: predecessors' tasks already exist
            tasks[node.name] = asyncio.ensure_future(start(node))
        traces = {t.node: t for t in await together(tasks.values())}
        output = next((name for name in graph.outputs if traces[name].taken), None)
        if output is None:  # no branch to an output was taken: the sample has no answer, and says why
            output = graph.output
            traces[output] = replace(traces[output], error=no_output(graph, traces))
        trace = Trace(dict(inputs), traces, output, graph.output_field)
        failed(span, trace.final)
        return trace


def no_output(graph: Graph, traces: Mapping[str, NodeTrace]) -> str:
    """Why no output ran on a sample: no branch to one was taken, and the replies that decided, if any could not
    be read (a choice the model did not make)."""
    deciders = dict.fromkeys(gate.subject for node in graph.nodes.values() for gate in node.gates)
    unread = [
        f"'{name}' could not be read ({traces[name].error})"
        for name in deciders
        if name in traces and traces[name].error
    ]
    outputs = " | ".join(graph.outputs)
    return f"{NOT_REACHED}: no branch to the output ({outputs}) was taken" + (
        f": {'; '.join(unread)}" if unread else ""
    )


async def ran(node: GraphNode, graph: Graph, calls: Calls, values: Mapping[str, str]) -> NodeTrace:
    """A node that runs on this sample, in its span: its kind's run, once or once per item."""
    with telemetry.span(f"node {node.name}", {"sbpc.node": node.name, "sbpc.node.kind": node.kind}) as span:
        trace = await (
            each_item(node, graph, calls, values)
            if node.each is not None
            else kind_of(node).forward(node, graph, calls, values)
        )
        span.set({"sbpc.node.items": len(trace.items) if node.each is not None else None})
        failed(span, trace)
        return trace


def failed(span: telemetry.Span, trace: NodeTrace) -> None:
    """A node's span (or a sample's, of its output node) marked as failed when it was, by the cause alone."""
    if trace.error is not None:
        span.fail(trace.cause or "failed", trace.cause or telemetry.OTHER)


def taken(node: GraphNode, inputs: Mapping[str, str], done: Mapping[str, NodeTrace]) -> bool:
    """Whether a node runs on this sample: the branches' one rule (language/nodes/branches.runs) over what ran."""
    if not node.gates and all(t.taken for t in done.values()):
        return True

    def ran(name: str) -> bool:
        return name in inputs or done[name].taken

    def value(subject: str, field: str | None) -> str | None:
        return inputs[subject] if subject in inputs else record_value(done[subject].output, field)

    return runs(node.gates, node.hints, ran, value)


async def each_item(node: GraphNode, graph: Graph, calls: Calls, values: Mapping[str, str]) -> NodeTrace:
    """A mapped node: its kind's run once per item of its list, all at once (the LLM layer bounds the calls in
    flight), gathered into one trace whose value is the JSON array of the runs' values."""
    each = node.each
    assert each is not None
    listed = items(values[each.over])
    if listed is None:
        return NodeTrace.without_reply(node.name, "", f"{NOT_REACHED}: '{each.over}' is not a JSON array")
    if len(listed) > each.max_items:
        calls.count("map items past max_items, not run")
    kind = kind_of(node)
    runs_ = await asyncio.gather(
        *(kind.forward(node, graph, calls, {**values, each.item: item}) for item in listed[: each.max_items])
    )
    return gathered(node, list(runs_))


def gathered(node: GraphNode, runs_: list[NodeTrace]) -> NodeTrace:
    """One trace for a mapped node's runs: lost if one was, else its items' values as a JSON array (the first
    item's error, when one could not be read), tokens and cost summed, the slowest run's latency."""
    lost = next((t for t in runs_ if t.lost), None)
    failed = next(((k, t) for k, t in enumerate(runs_, start=1) if t.error is not None), None)
    error = None if failed is None else f"item {failed[0]}: {failed[1].error}"
    if lost is not None:
        error = lost.error
    elif failed is not None and failed[1].blocked:
        error = failed[1].error
    values = [python_value(node.type, t.value) for t in runs_]
    text = json.dumps(values, ensure_ascii=False)
    return NodeTrace(
        node.name,
        "\n\n".join(t.prompt for t in runs_[:1]),
        text,
        text if failed is None else None,
        error,
        sum(t.prompt_tokens for t in runs_),
        sum(t.completion_tokens for t in runs_),
        max((t.latency for t in runs_), default=0.0),
        all(t.cached for t in runs_),
        failure=lost.failure if lost is not None else None,
        cost=sum(t.cost for t in runs_),
        items=tuple(runs_),
    )
