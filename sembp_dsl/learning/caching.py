"""What of a plan's prompt tokens a provider's prompt cache could serve, and what its cached rate would save.

A provider bills a prompt prefix an earlier request began with at a lower rate where litellm's table gives the
model one (OpenAI caches by itself, prefixes of 1,024 tokens on, in steps of 128). A plan prices every prompt token
at the full rate, so its cost stays an upper bound; this says apart how much of it repeats from call to call: a
model node's system message and its prompt up to the first thing a sample brings (its instruction, its demos), a
backward question up to its sample (the request, the instruction), an optimizer question up to its examples, a
judge's up to the inputs. The saving is a bound too: it supposes every call after the first finds its prefix in the
cache, which a provider keeps for minutes.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ..language.graph.graph import Graph, MetricSpec
from ..models import prices
from ..models.llm import LLM, LLMError

LEAST, STEP = 1024, 128  # OpenAI's prompt cache: prefixes of 1,024 tokens on, in steps of 128


def cacheable(chars: int) -> int:
    """The tokens of a repeated prefix of `chars` characters a cache serves (4 characters a token, as the plan
    counts)."""
    tokens = chars // 4
    return 0 if tokens < LEAST else tokens - tokens % STEP


def shared(first: str, second: str) -> int:
    return len(os.path.commonprefix([first, second]))


def varied(values: Mapping[str, str]) -> dict[str, str]:
    """Another sample's values: each one different from its first character on."""
    return {name: f"~{value}" for name, value in values.items()}


def prefixes(graph: Graph, values: Mapping[str, str], params: Sequence[str], sibling: bool) -> dict[str, int]:
    """Characters every call shares at the start of its prompt: each model node's (by name), and the longest of the
    backward questions (`backward`) and of the optimizer questions of `params` (`optimizer`)."""
    other = varied(values)
    found = {}
    for node in graph.model_nodes:
        systems = [node.system_message(v, graph.prompts) or "" for v in (values, other)]
        same = shared(node.render(values, graph.prompts), node.render(other, graph.prompts))
        found[node.name] = shared(*systems) + (same if systems[0] == systems[1] else 0)
    asked = [
        shared(*(graph.backward_questions(node, v, v[node.name], v[node.name], sibling)[0][1] for v in (values, other)))
        for node in graph.nodes.values()
        if node.hints
    ]
    found["backward"] = max(asked, default=0)
    examples = [[{"input": v, "output": v, "gradient": v}] for v in ("a", "b")]
    asked = [
        shared(*(graph.optimizer_prompt(param, graph.users(param)[0].name, e) for e in examples))
        for param in params
        if graph.users(param)
    ]
    found["optimizer"] = max(asked, default=0)
    return found


def judge_prefix(graph: Graph, judge: MetricSpec, values: Mapping[str, str]) -> int:
    inputs = {item.name: values[item.name] for item in graph.inputs}
    return shared(*(graph.judge_question(judge, v, "a", "") for v in (inputs, varied(inputs))))


def discount(llm: LLM, model: str) -> float | None:
    """Dollars a prompt token the provider's cache serves costs less on `model` than a full one; None when it has
    no cached rate (none in litellm's table, a price its block declares, a Router group, no model)."""
    try:
        spec = llm.model(model)
    except LLMError:
        return None
    if prices.declared(spec.settings, 1, 0) is not None or spec.settings.get("router"):
        return None
    full, cached = (prices.cost(spec.name, 1_000_000, 0, served) for served in (0, 1_000_000))
    return None if full is None or cached is None or cached >= full else (full - cached) / 1_000_000


def cache_bound(llm: LLM, uses: Sequence[tuple[str, str, int, int]]) -> tuple[dict[str, int], float | None]:
    """Of these uses (role, model, calls, the characters each call's prompt shares with the others), the prompt
    tokens a cache could serve at a cached rate by role, and at most what that rate saves (None: no model of the
    uses has one)."""
    tokens = {role: 0 for role, *_ in uses}
    saving: float | None = None
    for role, model, calls, prefix in uses:
        rate = discount(llm, model) if calls else None
        if rate is not None:
            served = (calls - 1) * cacheable(prefix)
            tokens[role] += served
            saving = (saving or 0.0) + served * rate
    return tokens, saving
