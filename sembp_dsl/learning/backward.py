"""Run trace + expected answer -> semantic gradients. The backward pass.

Feedback enters at the output node from the loss, then flows against the edges.
Each node waits until every successor has spoken, then, if other nodes feed it,
asks the backward model ONE question showing its own instruction, all its input
hints side by side, its output and its feedback, and hands line "Hint k" to its
k-th predecessor: each gradient is conditioned on its siblings. `no_sibling` asks
once per in-edge with that hint alone (the TextGrad-like ablation); `none` sends
no feedback at all, not even the loss (the paper's "no gradient" ablation).

Feedback flows only through the nodes that ran: a node on a branch the sample did not take gets none and asks
nothing, and the loss goes to the output node that ran. A mapped node is asked once, about all its items: its
output is the list of its runs' values, so one gradient speaks of every item (docs/paper.md).

A node's feedback is joined in a fixed order, its successors' order and then the
loss, and numbered, whatever order the replies arrive in: the same sample always
gives the same prompts, the same cache keys and the same result.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Collection

from .. import telemetry
from ..language.graph.graph import Graph
from ..language.kinds import kind_of
from ..language.nodes.node import GraphNode
from ..language.nodes.shapes import hints_shape
from ..language.nodes.trace import Trace
from ..models.llm import LLM, CallFailed
from ..runtime.evaluate import Verdict
from ..runtime.forward import shown
from ..runtime.tasks import together

HINT_LABEL = re.compile(
    r"^[\s*_#>\-]*(?:\d+[.)]\s*)?[*_]*hint[ \t]*(\d+)[ \t]*(?:\([^)\n]*\))?[*_]*[ \t]*[:.)\-–—][*_ \t]*(.*?)[*_ \t]*$",
    re.I | re.M,
)


def loss_feedback(graph: Graph, trace: Trace, expected: str, verdict: Verdict | None = None) -> str:
    """The loss, in words, for the output node: the metric's reason when it gave one (a judge's, a function's),
    else what the expected answer says (no LLM call)."""
    final = trace.final
    return graph.render_builtin(
        "loss",
        node=graph.output,
        output=final.output or final.reply.strip()[:200],
        expected=expected,
        parse_error=final.error,
        reason=verdict.reason if verdict else None,
        grade=f"{verdict.score:.2f}" if verdict else None,
        trajectory=kind_of(graph.nodes[trace.output_node]).trajectory(final),  # a tool loop's: which call went wrong
    )


def hint_lines(reply: str, count: int) -> dict[int, str]:
    """`Hint k: ...` lines by k (markdown, numbering and a label on a line of its own tolerated);
    with a single hint, an unlabelled first line is that hint."""
    lines: dict[int, str] = {}
    rows = reply.splitlines()
    for i, row in enumerate(rows):
        match = HINT_LABEL.match(row)
        if not match or not 1 <= int(match.group(1)) <= count or int(match.group(1)) in lines:
            continue
        text = match.group(2).strip()
        if not text:  # "Hint 1:" alone on its line: the hint is the next line, unless that is a label too
            following = next((r.strip() for r in rows[i + 1 :] if r.strip()), "")
            text = "" if HINT_LABEL.match(following) else following.strip("*_ ")
        if text:
            lines[int(match.group(1))] = text
    if count == 1 and not lines:
        first = next((line.strip() for line in rows if line.strip()), "")
        if first:
            lines[1] = first
    return lines


def numbered(items: list[str]) -> str:
    """Feedback from several sources, numbered as the paper's code numbers it."""
    return "\n".join(f"{i}. {text}" for i, text in enumerate(items, start=1))


def feedback_wanted(graph: Graph, params: Collection[str]) -> set[str]:
    """The nodes whose feedback is of use: they use one of `params`, or pass feedback on to a node that is."""
    wanted: set[str] = set()
    for name, node in graph.nodes.items():  # topological order: a node's predecessors are settled before it
        if any(p in params for p in node.params) or any(h in wanted for h in node.hints):
            wanted.add(name)
    return wanted


async def backward(
    graph: Graph,
    llm: LLM,
    trace: Trace,
    expected: str,
    mode: str = "sibling",
    wanted: Collection[str] | None = None,
    verdict: Verdict | None = None,
) -> dict[str, str]:
    """Feedback received by every node of one sample (its semantic gradient; "" for none); `verdict`: the metric's
    score and reason, which the loss says when there is a reason.

    `wanted`: the nodes whose feedback is of use (`feedback_wanted`; default every node): a backward question
    none of whose hints goes to one is not asked. A backward call that fails for good gives its receivers no
    gradient and is counted; it never ends the run.
    """
    if mode == "none":
        return {name: "" for name in graph.nodes}
    with telemetry.span("backward", {"sbpc.gradient": mode}) as span:
        gradients = await flow(graph, llm, trace, expected, mode, wanted, verdict)
        span.set({"sbpc.gradients": sum(bool(g) for g in gradients.values())})
        return gradients


async def flow(
    graph: Graph,
    llm: LLM,
    trace: Trace,
    expected: str,
    mode: str,
    wanted: Collection[str] | None,
    verdict: Verdict | None,
) -> dict[str, str]:
    """The feedback of `backward`, flowing from the loss against the edges, a task per node."""
    received: dict[str, dict[str, str]] = {name: {} for name in graph.nodes}  # receiver -> sender -> line
    loss = loss_feedback(graph, trace, expected, verdict)
    tasks: dict[str, asyncio.Task] = {}

    def feedback(node: GraphNode) -> str:
        lines = [received[node.name][s] for s in node.successors if s in received[node.name]]
        if node.name == trace.output_node:  # of `output easy | hard`, the one that ran
            lines.append(loss)
        return numbered(lines) if len(lines) > 1 else "".join(lines)

    async def send(node: GraphNode) -> None:
        await asyncio.gather(*(tasks[s] for s in node.successors))  # every successor has spoken
        mine = feedback(node)
        if not node.hints or not mine or not trace.nodes[node.name].taken:  # a branch not taken passes nothing on
            return
        asks = [
            (receivers, prompt)
            for receivers, prompt in graph.backward_questions(
                node, trace.values, shown(node, trace.nodes[node.name]), mine, sibling=mode == "sibling"
            )
            if wanted is None or any(r in wanted for r in receivers)
        ]
        replies = await asyncio.gather(
            *(llm.complete("backward", prompt, hints_shape(len(receivers))) for receivers, prompt in asks),
            return_exceptions=True,
        )
        for (receivers, _), reply in zip(asks, replies):
            if isinstance(reply, CallFailed):
                llm.ledger.count("gradients lost to failed calls", len(receivers))
                continue
            if isinstance(reply, BaseException):
                raise reply
            lines = hint_lines(reply.text, len(receivers))
            for k, receiver in enumerate(receivers, start=1):
                if k in lines:
                    received[receiver][node.name] = lines[k]
                else:
                    llm.ledger.count("gradient lines missing")

    for name in reversed(list(graph.nodes)):  # reverse topological order: successors' tasks already exist
        tasks[name] = asyncio.ensure_future(send(graph.nodes[name]))
    await together(tasks.values())
    return {name: feedback(node) for name, node in graph.nodes.items()}


def backward_calls(graph: Graph, mode: str, params: Collection[str] | None = None) -> int:
    """Backward calls one sample costs (when feedback reaches every node), optimizing `params` (default: every
    trainable one): see docs/optimize.md."""
    wanted = feedback_wanted(graph, graph.trainable if params is None else params)
    if mode == "sibling":
        return sum(1 for n in graph.nodes.values() if any(h in wanted for h in n.hints))
    if mode == "no_sibling":
        return sum(h in wanted for n in graph.nodes.values() for h in n.hints)
    return 0
