"""Gradients -> updated prompts. Semantic gradient descent.

For each trainable prompt, the optimizer model sees the current prompt and, for
each selected sample, what the prompt's node received, what it produced and the
feedback it got; it answers with a new prompt in <prompt>...</prompt>. Candidates
that cannot be right are rejected here, before any of them is tried.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from .graph import Graph, describe
from .llm import LLM
from .runtime import Trace
from .templates import TemplateSyntaxError, variables

OPEN_TAG = re.compile(r"<prompt>", re.I)
CLOSE_TAG = re.compile(r"</prompt>", re.I)
WORD = re.compile(r"\w+")
COPY_WINDOW = 8  # words: a run this long from an example's input is that example, not a rule


@dataclass(frozen=True)
class Candidate:
    param: str
    new: str | None  # None when rejected
    reason: str | None  # why rejected
    reply: str


def max_chars(old: str) -> int:
    return max(800, 3 * len(old))


def examples_for(graph: Graph, param: str, samples: Sequence[tuple[Trace, Mapping[str, list[str]]]]) -> list[dict]:
    """What the optimizer sees of each sample, for every node that uses this prompt."""
    out = []
    for trace, gradients in samples:
        values = trace.values
        for node in graph.users(param):
            out.append({
                "input": describe(node.inputs, values),
                "output": trace.nodes[node.name].reply.strip(),
                "gradient": "\n".join(gradients.get(node.name, [])),
            })
    return out


def extract(reply: str) -> str | None:
    """What follows the last <prompt> (models often echo the current one first), up to </prompt> if any."""
    parts = OPEN_TAG.split(reply)
    return CLOSE_TAG.split(parts[-1])[0].strip() if len(parts) > 1 else None


def _shingles(text: str) -> set[tuple[str, ...]]:
    words = WORD.findall(text.casefold())
    return {tuple(words[i:i + COPY_WINDOW]) for i in range(len(words) - COPY_WINDOW + 1)}


def validate(graph: Graph, param: str, old: str, new: str | None, examples: list[dict]) -> str | None:
    """Why a candidate must be rejected, or None when it may be tried."""
    if new is None:
        return "no <prompt>...</prompt> in the reply"
    if not new.strip():
        return "empty prompt"
    if len(new) > max_chars(old):
        return f"too long ({len(new)} characters, limit {max_chars(old)})"
    if new.strip() == old.strip():
        return "unchanged"
    if "feedback" in new.casefold() and "feedback" not in old.casefold():
        return "mentions 'feedback'"
    try:
        used = variables(new)
    except TemplateSyntaxError as exc:
        return f"breaks the template: {exc.message}"
    for node in graph.users(param):
        undefined = used - set(node.inputs)
        if undefined:
            return f"uses {', '.join(sorted(undefined))}, which node '{node.name}' does not receive"
    copied = _shingles(new) - _shingles(old)
    if any(copied & _shingles(e["input"]) for e in examples):
        return "copies text from an example"
    return None


async def propose(graph: Graph, llm: LLM, param: str, samples: Sequence[tuple[Trace, Mapping[str, list[str]]]]) -> Candidate:
    old = graph.prompts[param]
    examples = examples_for(graph, param, samples)
    node = graph.users(param)[0].name
    prompt = graph.render_builtin("optimizer", node=node, param=param, prompt=old, examples=examples, max_chars=max_chars(old))
    reply = (await llm.complete("optimizer", prompt)).text
    new = extract(reply)
    reason = validate(graph, param, old, new, examples)
    if reason is not None:
        llm.ledger.count("candidates rejected")
    return Candidate(param, None if reason else new, reason, reply)
