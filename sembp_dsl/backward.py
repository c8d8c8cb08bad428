"""Run trace + expected answer -> semantic gradients. The backward pass.

Feedback enters at the output node from the loss, then flows against the edges.
Each node waits until every successor has spoken, then, if other nodes feed it,
asks the backward model ONE question showing all its input hints side by side and
hands line "Hint k" to its k-th predecessor: each gradient is conditioned on its
siblings. `no_sibling` asks once per in-edge with that hint alone (the TextGrad-like
ablation); `none` sends nothing past the loss.
"""

from __future__ import annotations

import asyncio
import re
from .graph import Graph, GraphNode
from .llm import LLM
from .runtime import Trace

HINT_LINE = re.compile(r"^[\s*#>-]*hint\s*(\d+)\s*\**\s*(?:\([^)]*\))?\s*[:.)\-]\s*(.+?)\s*$", re.I | re.M)


def loss_feedback(graph: Graph, trace: Trace, expected: str) -> str:
    """The loss, in words, for the output node (no LLM call: the expected answer says it)."""
    final = trace.final
    return graph.render_builtin("loss", node=graph.output, output=final.output or final.reply.strip()[:200],
                                expected=expected, parse_error=final.error)


def hint_lines(reply: str, count: int) -> dict[int, str]:
    """`Hint k: ...` lines by k; with a single hint, an unlabelled first line is that hint."""
    lines = {int(k): text for k, text in HINT_LINE.findall(reply) if 1 <= int(k) <= count}
    if count == 1 and not lines:
        first = next((line.strip() for line in reply.splitlines() if line.strip()), "")
        if first:
            lines[1] = first
    return lines


async def backward(graph: Graph, llm: LLM, trace: Trace, expected: str, mode: str = "sibling") -> dict[str, list[str]]:
    """Feedback received by every node of one sample: its semantic gradient."""
    feedback: dict[str, list[str]] = {name: [] for name in graph.nodes}
    feedback[graph.output].append(loss_feedback(graph, trace, expected))
    tasks: dict[str, asyncio.Task] = {}

    async def send(node: GraphNode) -> None:
        await asyncio.gather(*(tasks[s] for s in node.successors))  # every successor has spoken
        if mode == "none" or not node.hints or not feedback[node.name]:
            return
        asks = graph.backward_questions(node, trace.values, trace.nodes[node.name].reply.strip(),
                                        "\n".join(feedback[node.name]), sibling=mode == "sibling")
        replies = await asyncio.gather(*(llm.complete("backward", prompt) for _, prompt in asks))
        for (receivers, _), reply in zip(asks, replies):
            lines = hint_lines(reply.text, len(receivers))
            for k, receiver in enumerate(receivers, start=1):
                if k in lines:
                    feedback[receiver].append(lines[k])
                else:
                    llm.ledger.count("gradient lines missing")

    for name in reversed(graph.nodes):  # reverse topological order: successors' tasks already exist
        tasks[name] = asyncio.ensure_future(send(graph.nodes[name]))
    try:
        await asyncio.gather(*tasks.values())
    except BaseException:
        for task in tasks.values():
            task.cancel()
        raise
    return feedback


def backward_calls(graph: Graph, mode: str) -> int:
    """Backward calls one sample costs (when feedback reaches every node): see docs/optimize.md."""
    if mode == "sibling":
        return sum(1 for n in graph.nodes.values() if n.hints)
    if mode == "no_sibling":
        return sum(len(n.hints) for n in graph.nodes.values())
    return 0

