"""Gradients -> updated prompts. Semantic gradient descent.

For each trainable prompt, the optimizer model sees the current prompt and, for
each selected sample, what the prompt's node received, what it produced and the
feedback it got; it answers with a new prompt in <prompt>...</prompt>. Candidates
that cannot be right are rejected here, before any of them is tried: a reply cut
off by the token limit, a prompt that is template code rather than text (a reply
is data from a stranger), or one that does not render on the samples it came from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jinja2 import nodes

from .. import telemetry
from ..language.diagnostics import bad_characters
from ..language.graph import Graph, describe, max_chars
from ..language.templates import ENV, TemplateError, TemplateSyntaxError
from ..language.trace import Trace
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


def kind_of(reason: str) -> str:
    """A rejection's reason by kind alone, in none of the words a model, a server or a template sent."""
    return next((kind for opening, kind in REASON_KINDS if reason.startswith(opening)), "not text a prompt may hold")


Samples = Sequence[tuple[Trace, Mapping[str, str]]]  # a trace and the gradient of each of its nodes


def examples_for(graph: Graph, param: str, samples: Samples) -> list[dict]:
    """What the optimizer sees of each sample, for every node that uses this prompt."""
    out = []
    for trace, gradients in samples:
        values = trace.values
        for node in graph.users(param):
            out.append(
                {
                    "input": describe(node.inputs, values),
                    "output": shown(node, trace.nodes[node.name]),
                    "gradient": gradients.get(node.name, ""),
                }
            )
    return out


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


async def propose(graph: Graph, llm: LLM, param: str, samples: Samples) -> Candidate:
    """A candidate for one prompt, in its span: the optimizer's call under it, the candidate's fate on it."""
    with telemetry.span("optimizer", {"sbpc.param": param, "sbpc.samples": len(samples)}) as span:
        candidate = await proposed(graph, llm, param, samples)
        reason = candidate.reason if telemetry.content() or candidate.reason is None else kind_of(candidate.reason)
        span.set({"sbpc.candidate.valid": candidate.new is not None, "sbpc.candidate.rejected": reason})
        return candidate


async def proposed(graph: Graph, llm: LLM, param: str, samples: Samples) -> Candidate:
    old = graph.prompts[param]
    examples = examples_for(graph, param, samples)
    node = graph.users(param)[0].name
    prompt = graph.optimizer_prompt(param, node, examples)
    shape = graph.candidate_shape(param)
    try:
        completion = await llm.complete("optimizer", prompt, shape)
    except CallFailed as exc:
        llm.ledger.count("candidates rejected")
        return Candidate(param, None, f"the optimizer call failed: {exc}", "")
    new, reason = extract(completion.text, completion.finish_reason)
    if new is None:
        llm.ledger.count("candidates rejected (format)")
    else:
        reason = validate(graph, param, old, new, examples, [trace.values for trace, _ in samples])
    if reason is not None:
        llm.ledger.count("candidates rejected")
    return Candidate(param, None if reason else new, reason, completion.text)
