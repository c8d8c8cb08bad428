"""Gradients -> updated prompts. Semantic gradient descent.

For each trainable prompt, the optimizer model sees the current prompt and, for
each selected sample, what the prompt's node received, what it produced and the
feedback it got; it answers with a new prompt in <prompt>...</prompt>. Candidates
that cannot be right are rejected here, before any of them is tried: a reply cut
off by the token limit, a prompt that is template code rather than text (a reply
is data from a stranger), or one that does not render on the samples it came from.

A param that describes a tool to a model (`function lookup = ... { description = lookup_doc }`) is shown as
what it is: the tool's name, its arguments' schema, and how the node called it, in samples it answered right and
in those it got wrong. Where the node's own instruction is trained too, one call proposes both (GEPA's way: the
description is written with the instruction that tells the model when to call it), the description in
<tool name="...">...</tool> after the <prompt> block.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jinja2 import nodes

from .. import telemetry
from ..language.diagnostics import bad_characters
from ..language.graph.graph import Graph, describe, max_chars
from ..language.kinds import kind_of
from ..language.kinds.agent import DescribedTool, calls_of, described_tools
from ..language.kinds.agent.toolcalls import SHOWN_ARGUMENT, SHOWN_RESULT, call_line
from ..language.nodes.templates import ENV, TemplateError, TemplateSyntaxError
from ..language.nodes.trace import Trace
from ..models.llm import LLM, CallFailed
from ..records.record import Proposal
from ..runtime.forward import shown

OPEN_TAG = re.compile(r"<prompt>", re.I)
BLOCK = re.compile(r"<prompt>(.*?)</prompt>", re.I | re.S)
WORD = re.compile(r"\w+")
COPY_WINDOW = 8  # words: a run this long from an example's input is that example, not a rule


@dataclass(frozen=True)
class Candidate:
    param: str
    new: str | None  # None when rejected
    reason: str | None  # why rejected
    reply: str

    def proposal(self, fate: str) -> Proposal:
        """As the run record keeps it, with its fate."""
        return Proposal(self.param, fate, self.new, self.reply)


#: Why a candidate was rejected, by kind: each reason's opening words, and what a span says of it without
#: --otel-content (the rest of a reason may quote the optimizer's reply, a template error or a server).
REASON_KINDS = (
    ("cut off by the token limit", "cut off by the token limit"),
    ("no closed <prompt>", "no closed <prompt>...</prompt> in the reply"),
    ("no closed <tool", "no closed <tool>...</tool> in the reply"),
    ("empty prompt", "empty prompt"),
    ("too long", "too long"),
    ("unchanged", "unchanged"),
    ("mentions 'feedback'", "mentions 'feedback'"),
    ("breaks the template", "breaks the template"),
    ("is template code", "is template code"),
    ("uses ", "uses a name its node does not receive"),
    ("copies text from an example", "copies text from an example"),
    ("does not render on a training sample", "does not render on a training sample"),
    ("the optimizer call failed", "the optimizer call failed"),
)


def traced(reason: str) -> str:
    """A rejection's reason as a span carries it: in full only where the user opted in to text in spans."""
    return reason if telemetry.content() else reason_kind(reason)


def reason_kind(reason: str) -> str:
    """A rejection's reason by kind alone, in none of the words a model, a server or a template sent."""
    return next((kind for opening, kind in REASON_KINDS if reason.startswith(opening)), "not text a prompt may hold")


Samples = Sequence[tuple[Trace, Mapping[str, str]]]  # a trace and the gradient of each of its nodes


def examples_for(graph: Graph, param: str, samples: Samples) -> list[dict]:
    """What the optimizer sees of each sample, for every node that uses this prompt and ran on it (a node behind
    a branch the sample did not take did no work to learn from). A tool loop's calls are in its output; the loss
    repeats them for the backward model (backward.loss_feedback), so the gradient is shown without."""
    out = []
    for trace, gradients in samples:
        values = trace.values
        for node in graph.users(param):
            if not trace.nodes[node.name].taken:
                continue
            gradient = gradients.get(node.name, "")
            calls = kind_of(node).trajectory(trace.nodes[node.name])
            out.append(
                {
                    "input": describe(node.inputs, values),
                    "output": shown(node, trace.nodes[node.name]),
                    "gradient": gradient.replace(calls, "").strip() if calls else gradient,
                }
            )
    return out


CALLS_SHOWN = 4  # right calls and wrong calls of a tool the optimizer is shown, each


def tool_shown(graph: Graph, tool: DescribedTool, samples: Samples, right: Sequence[Trace]) -> dict:
    """What the optimizer is shown of a tool whose description it rewrites: its name, its param and text, its
    arguments' JSON Schema, and its calls in samples the pipeline answered right and in those it got wrong (each
    call with its result, once)."""

    def calls(traces: Sequence[Trace]) -> list[str]:
        lines = [
            call_line(call, result)
            for trace in traces
            for node in graph.users(tool.param)
            if node.name in trace.nodes
            for call, result in calls_of(trace.nodes[node.name], tool.name)
        ]
        return list(dict.fromkeys(lines))[:CALLS_SHOWN]

    return {
        "name": tool.name,
        "param": tool.param,
        "text": graph.prompts[tool.param],
        "arguments": json.dumps(tool.arguments, ensure_ascii=False),
        "right": calls(right),
        "wrong": calls([trace for trace, _ in samples]),
        "max_chars": max_chars(graph.prompts[tool.param]),
    }


def tools_chars(graph: Graph, group: Sequence[str]) -> int:
    """The most characters the tools a group's optimizer call shows add to its prompt (`tool_shown`): each one's
    description and schema, its calls at their longest, and the words around them."""
    total = 0
    for tool in filter(None, (described(graph, param) for param in group)):
        call = len(tool.name) + sum(len(key) + SHOWN_ARGUMENT + 4 for key in tool.arguments.get("properties", {}))
        schema = len(json.dumps(tool.arguments, ensure_ascii=False))
        total += 400 + max_chars(graph.prompts[tool.param]) + schema + CALLS_SHOWN * (call + SHOWN_RESULT + 16)
    return total


def described(graph: Graph, param: str) -> DescribedTool | None:
    """The tool a param describes, if it describes one."""
    for node in graph.users(param):
        for tool in described_tools(node, graph):
            if tool.param == param:
                return tool
    return None


def groups(graph: Graph, params: Sequence[str]) -> list[tuple[str, ...]]:
    """The params each optimizer call proposes, in the order given: a node's instruction with the descriptions of
    its tools that are proposed too (when the optimizer prompt shows tools: the built-in one does), else each
    alone."""
    if "tools" not in graph.stated("optimizer"):
        return [(param,) for param in params]
    joined: dict[str, list[str]] = {}
    for param in params:
        if described(graph, param) is not None:
            continue
        for node in graph.users(param):
            for tool in described_tools(node, graph):
                taken = {p for ps in joined.values() for p in ps}
                if tool.param in params and tool.param not in taken:
                    joined.setdefault(param, []).append(tool.param)
    taken = {p for ps in joined.values() for p in ps}
    return [(param, *joined.get(param, ())) for param in params if param not in taken]


def tool_block(reply: str, name: str) -> str | None:
    """The last closed <tool name="NAME">...</tool> block of a reply, or None."""
    blocks = re.findall(rf'<tool name="{re.escape(name)}">(.*?)</tool>', reply, re.S | re.I)
    return blocks[-1].strip() if blocks else None


def extract(reply: str, finish_reason: str | None = None) -> tuple[str | None, str | None]:
    """The last closed <prompt>...</prompt> block (models often echo the current one first), or why there is none.

    An unclosed block is never a candidate: when the token limit cut the reply, it is a fragment. Nor is a block
    the reply ends with when the limit cut it: a grammar closes a block at its bound, mid-sentence.
    """
    blocks = list(BLOCK.finditer(reply))
    tail = reply[blocks[-1].end() :] if blocks else reply
    if finish_reason == "length" and (OPEN_TAG.search(tail) or not blocks or not tail.strip()):
        return None, "cut off by the token limit before the prompt ended (raise max_tokens of the optimizer model)"
    if not blocks:
        return None, "no closed <prompt>...</prompt> in the reply"
    return OPEN_TAG.split(blocks[-1].group(1))[-1].strip(), None


def template_code(text: str) -> str | None:
    """Why a candidate is code rather than text: it may hold plain `{{ name }}` and nothing else."""
    try:
        body = ENV.parse(text).body
    except TemplateSyntaxError as exc:
        return f"breaks the template: {exc.message}"
    except RecursionError:
        return "breaks the template: nested too deeply"
    for statement in body:
        if not isinstance(statement, nodes.Output):
            return "is template code ({% ... %}), not text"
        for part in statement.nodes:
            if not isinstance(part, (nodes.TemplateData, nodes.Name)):
                return "is template code (only a plain {{ input }} may appear), not text"
    return None


def _shingles(text: str) -> set[tuple[str, ...]]:
    words = WORD.findall(text.casefold())
    return {tuple(words[i : i + COPY_WINDOW]) for i in range(len(words) - COPY_WINDOW + 1)}


def validate(
    graph: Graph, param: str, old: str, new: str, examples: list[dict], values: Sequence[Mapping[str, str]] = ()
) -> str | None:
    """Why a candidate must be rejected, or None when it may be tried.

    `values`: the input values of the samples it was made from; it must render on each.
    """
    if not new.strip():
        return "empty prompt"
    if graph.limits_length and len(new) > max_chars(old):
        return f"too long ({len(new)} characters, limit {max_chars(old)})"
    if new.strip() == old.strip():
        return "unchanged"
    if "feedback" in new.casefold() and "feedback" not in old.casefold():
        return "mentions 'feedback'"
    code = bad_characters(new) or template_code(new)
    if code:
        return code
    used = {n.name for n in ENV.parse(new).find_all(nodes.Name)}
    for node in graph.users(param):
        undefined = used - set(node.inputs)
        if undefined:
            return f"uses {', '.join(sorted(undefined))}, which node '{node.name}' does not receive"
    copied = _shingles(new) - _shingles(old)
    if any(copied & _shingles(e["input"]) for e in examples):
        return "copies text from an example"
    proposed = {**graph.prompts, param: new}
    for sample in values:
        for node in graph.users(param):
            try:
                node.render(sample, proposed)
            except TemplateError as exc:  # it fails on this sample (RenderError): this candidate cannot be tried
                return f"does not render on a training sample ({type(exc).__name__}: {exc})"
    return None


async def propose(
    graph: Graph, llm: LLM, group: Sequence[str], samples: Samples, right: Sequence[Trace] = ()
) -> list[Candidate]:
    """A candidate for each param of a group (`groups`), from one optimizer call, in its span: the call under it,
    the candidates' fates on it. `right`: traces of samples the pipeline answered right (a tool's good calls)."""
    with telemetry.span("optimizer", {"sbpc.param": group[0], "sbpc.samples": len(samples)}) as span:
        candidates = await proposed(graph, llm, group, samples, right)
        span.set(
            {
                "sbpc.candidate.valid": all(c.new is not None for c in candidates),
                "sbpc.candidate.rejected": "; ".join(f"{c.param}: {traced(c.reason)}" for c in candidates if c.reason)
                or None,
            }
        )
        return candidates


async def proposed(
    graph: Graph, llm: LLM, group: Sequence[str], samples: Samples, right: Sequence[Trace]
) -> list[Candidate]:
    param, *along = group
    examples = examples_for(graph, param, samples)
    node = graph.users(param)[0].name
    tool = described(graph, param)
    tools = [tool_shown(graph, t, samples, right) for t in map(lambda p: described(graph, p), along) if t]
    shown_tool = tool_shown(graph, tool, samples, right) if tool is not None else None
    prompt = graph.optimizer_prompt(param, node, examples, tool=shown_tool, tools=tools)
    try:
        completion = await llm.complete("optimizer", prompt, graph.candidate_shape(param, tools))
    except CallFailed as exc:
        llm.ledger.count("candidates rejected", len(group))
        return [Candidate(p, None, f"the optimizer call failed: {exc}", "") for p in group]
    values = [trace.values for trace, _ in samples]
    new, reason = extract(completion.text, completion.finish_reason)
    out = [checked(graph, llm, param, new, reason, examples, values, completion.text)]
    for shown_along in tools:
        text = tool_block(completion.text, shown_along["name"]) if new is not None else None
        why = reason or (None if text else f'no closed <tool name="{shown_along["name"]}">...</tool> in the reply')
        out.append(checked(graph, llm, shown_along["param"], text, why, examples, values, completion.text))
    return out


def checked(
    graph: Graph,
    llm: LLM,
    param: str,
    new: str | None,
    reason: str | None,
    examples: list[dict],
    values: Sequence[Mapping[str, str]],
    reply: str,
) -> Candidate:
    """A param's candidate from an optimizer reply, or why there is none (counted in the ledger)."""
    if new is None:
        llm.ledger.count("candidates rejected (format)")
    else:
        reason = validate(graph, param, graph.prompts[param], new, examples, values)
    if reason is not None:
        llm.ledger.count("candidates rejected")
    return Candidate(param, None if reason else new, reason, reply)
