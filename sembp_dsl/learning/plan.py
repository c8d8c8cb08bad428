"""The most a run can spend, before it spends anything: the loop's forward passes plus what its strategies declare.

The forward and gate evaluations are counted by the loop's own formula (`optimize.forward_passes`), and every
other call by the strategies the loop asks (`strategies.py`), so the plan cannot drift from the step it bounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ..errors import Option, worded
from ..language.blocks.method import Method
from ..language.graph.graph import Graph, MetricSpec
from ..language.kinds import kind_of
from ..language.nodes.demos import as_text
from ..language.nodes.shapes import node_shape
from ..models.constraints import max_tokens
from ..models.llm import LLM, LLMError
from ..models.transport import serving
from ..runtime.datasets import Sample
from ..runtime.evaluate import sample_inputs
from .caching import LEAST, cache_bound, judge_prefix, prefixes
from .optimize import forward_passes, savings
from .stats import NonInferiority, step_alpha, wins_needed
from .strategies import PRICED_CALL, Scale, check_acting, check_priced, strategies

#: Why the plan's prompt tokens are far above what a run uses: what a prompt holds of earlier nodes' replies
#: cannot be known before they are given, so each is counted as long as max_tokens lets it be.
PROMPT_BOUND = (
    "prompt tokens are an upper bound: every earlier node's reply is counted as long as its max_tokens allows "
    "(replies are usually far shorter, so a run often sends a tenth of it)"
)


@dataclass(frozen=True)
class Usage:
    """What a plan allows one role, or one model: calls, completion tokens (None: no max_tokens, no bound), and
    prompt tokens (a bound: 4 characters a token, every reply in a prompt at its max_tokens)."""

    calls: int = 0
    completion_tokens: int | None = 0
    prompt_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        completion = (
            None
            if self.completion_tokens is None or other.completion_tokens is None
            else self.completion_tokens + other.completion_tokens
        )
        return Usage(self.calls + other.calls, completion, self.prompt_tokens + other.prompt_tokens)


@dataclass(frozen=True)
class Plan:
    """The most a run can spend, before it spends anything (the formula of docs/optimize.md; retries not counted),
    by role and, where nodes name models of their own, by model."""

    calls: dict[str, int]
    completion_tokens: dict[str, int | None]  # None: a model of the role has no max_tokens, so no bound
    prompt_tokens: dict[str, int]  # a bound: 4 characters a token, every reply in a prompt at its max_tokens
    cost: float | None  # None: litellm cannot price a model, or a model has no max_tokens
    warning: str | None = None  # why the run cannot accept a step (an Option: the sizes as the caller gives them)
    unforeseen: tuple[str, ...] = ()  # savings the run may make that no bound can count on
    models: dict[str, dict] = field(default_factory=dict)  # the same by model: calls, completion and prompt tokens
    names: dict[str, str] = field(default_factory=dict)  # the model each role or named model that is called calls
    # what each strategy's own proposals may make, and the loop's forward passes (`loop`): calls and dollars
    strategies: dict[str, dict] = field(default_factory=dict)
    data: str = ""  # how sbpc's default sizes were scaled to fit a small data set
    # of the prompt tokens, those a provider's cache could serve at a model's cached rate, by role (caching.py)
    cached_tokens: dict[str, int] = field(default_factory=dict)
    cache_saving: float | None = None  # at most what that rate saves off `cost`; None: no model has a cached rate

    def render(self) -> str:
        lines = [f"plan: at most {sum(self.calls.values())} calls (without retries)"]
        if self.data:
            lines.append(f"  data: {self.data}")

        def line(name: str, calls: int, completion: int | None, prompt: int) -> str:
            bound = "no max_tokens: unbounded" if completion is None else f"at most {completion} completion tokens"
            return f"  {name:<9} {calls:>6} calls, at most about {prompt} prompt tokens, {bound}"

        for role, calls in self.calls.items():
            lines.append(line(role, calls, self.completion_tokens[role], self.prompt_tokens[role]))
        if set(self.models) - set(self.calls):  # nodes with models of their own: the same by model
            lines.append("  by model:")
            lines += [
                "  " + line(model, u["calls"], u["completion_tokens"], u["prompt_tokens"])
                for model, u in self.models.items()
                if u["calls"]
            ]
        if self.strategies:
            lines.append("  by strategy (its own calls; `loop`: the forward and gate passes every step shares):")
            lines += [
                f"    {name:<9} {u['calls']:>6} calls, "
                + ("cost cannot be bounded" if u["cost"] is None else f"at most about ${u['cost']:.4f}")
                for name, u in self.strategies.items()
            ]
        lines.append(
            "  cost: "
            + (
                "cannot be bounded (a model without a price or without max_tokens)"
                if self.cost is None
                else f"at most about ${self.cost:.4f}"
            )
        )
        if self.cache_saving is not None:
            lines.append(f"  {self.cache_words()}")
        lines.append(f"  {PROMPT_BOUND}")
        if self.unforeseen:
            lines.append("  fewer calls when: " + "; ".join(self.unforeseen))
        if self.names:
            lines.append("  models: " + ", ".join(f"{key} {name}" for key, name in self.names.items()))
        learner = embedded_learners(self.names)
        if learner:
            lines.append(f"  warning[{EMBEDDED_LEARNERS}]: {learner}")
        return "\n".join(lines)

    def cache_words(self) -> str:
        """What of the bound a provider's cache could serve, at a model's cached rate."""
        cached, prompt = sum(self.cached_tokens.values()), sum(self.prompt_tokens.values())
        if not cached:
            return (
                f"cached rate: no prompt repeats a prefix of {LEAST:,} tokens or more (the least OpenAI caches), "
                "so no token of the cost above is billed at it"
            )
        return (
            f"cached rate: up to about {cached} of those prompt tokens ({cached / max(prompt, 1):.0%}) repeat a "
            f"prefix of {LEAST:,} tokens or more that a provider's cache may serve (a node's system message, "
            f"instruction and demos; a built-in question's request and instruction): at most about "
            f"${self.cache_saving or 0.0:.4f} less than the cost above, which prices them in full"
        )


def plan(
    graph: Graph,
    llm: LLM,
    method: Method,
    train: Sequence[Sample],
    val: Sequence[Sample],
    test: Sequence[Sample],
    mapping: Mapping[str, str],
    judge: MetricSpec | None = None,
) -> Plan:
    """Calls per role: each model node's forward calls (`forward_passes`, to its own model), a `judge` metric's as
    many (it asks its model once per answer scored), and what each strategy declares a step costs, times the
    iterations. What the run may save beyond that depends on its answers, and is named in `unforeseen`.
    SettingError when no strategy has anything to change, or objective cost has no price to compare."""
    check_acting(graph, method)
    check_priced(graph, method, llm)
    gate = {"val": len(val), "train": len(train), "none": 0}[method.gate]
    passes = forward_passes(method, len(train), gate, len(test))
    models = {node.model for node in graph.model_nodes} | ({judge.model} if judge is not None else set())
    limits = {model: llm.models[model].settings.get("max_tokens") for model in models}
    longest = longest_prompts(graph, train, mapping, limits)
    widest = max(longest.values(), default=0)
    steps = strategies(method)
    runs_on = {
        node.name: dearest(llm, node.model, [m for s in steps for m in s.dearer(graph).get(node.name, ())])
        for node in graph.model_nodes
    }

    def usage(model: str, count: int, prompt_chars: int, shaped: bool = True) -> Usage:
        """A model's calls: a reply held to a grammar may take more than max_tokens (constraints.reply_tokens),
        a text node's may not."""
        if not count:
            return Usage()
        bound = llm.reply_tokens(model, shaped) if configured(llm, model) else max_tokens(llm.models[model].settings)
        return Usage(count, None if bound is None else count * int(bound), count * prompt_chars // 4)

    uses: list[tuple[str, str, Usage, str]] = [
        (
            "forward",
            runs_on[node.name],
            usage(
                runs_on[node.name],
                passes * kind_of(node).model_calls(node) * node.most_runs,
                longest[node.name],
                node_shape(node.type, node.parse) is not None,
            ),
            LOOP,
        )
        for node in graph.model_nodes
    ]
    roles = ["forward"]
    for step in steps:
        for demand in step.cost(Scale(graph, len(train), widest)):
            # a role's calls go to the model of that name
            calls = method.iterations * demand.calls
            uses.append((demand.role, demand.role, usage(demand.role, calls, demand.prompt_chars), step.name))
            roles.append(demand.role)
    if judge is not None:
        rubric = len(graph.prompts.get(judge.rubric or "", ""))
        output = longest.get(graph.output, widest)  # a function node's output: as long as the longest prompt
        uses.append(("judge", judge.model, usage(judge.model, passes, output + rubric + 800), LOOP))
        roles.append("judge")
    unforeseen = (
        *savings(method),
        *(s for step in steps for s in step.unforeseen(graph)),
        "answers from the response cache",
    )
    acting = [step.name for step in steps if step.params(graph)]  # a strategy with nothing to change: no line
    heads = repeated_heads(graph, method, train, mapping, limits, judge)
    keys = [node.name for node in graph.model_nodes] + roles[1:]  # what each use's prompts are: `uses`' order
    cached, saving = cache_bound(llm, [(r, m, u.calls, heads.get(k, 0)) for (r, m, u, _), k in zip(uses, keys)])
    whole = totals(llm, uses, roles, gate_warning(method, gate), unforeseen, acting)
    return replace(whole, cached_tokens=cached, cache_saving=saving)


def dearest(llm: LLM, model: str, others: Sequence[str]) -> str:
    """The dearest of a node's model and those a strategy may move it to (a model without a price first: no bound)."""

    def dearness(name: str) -> tuple[bool, float]:
        price = llm.price(name, *PRICED_CALL)
        return price is None, price or 0.0

    return max((model, *others), key=dearness)


def longest_prompts(
    graph: Graph, train: Sequence[Sample], mapping: Mapping[str, str], limits: Mapping[str, Any]
) -> dict[str, int]:
    """Each node's longest forward prompt over a few training samples (characters): node outputs as long as their
    max_tokens allow (`limits`, by model), and a trainable demos param as full as it may come to be, each example
    the sample's own."""
    longest = {node.name: 0 for node in graph.model_nodes}
    for sample in train[:5]:
        values = bound_values(graph, sample, mapping, limits)
        prompts = {**graph.prompts}
        for name in graph.trainable_demos:
            spec = graph.demos[name]
            example = {key: values[key] for key in (*graph.nodes[spec.node].inputs, spec.node)}
            prompts[name] = as_text([example] * spec.max)
        for node in graph.model_nodes:
            longest[node.name] = max(longest[node.name], len(node.render(values, prompts)))
    return longest


def bound_values(graph: Graph, sample: Sample, mapping: Mapping[str, str], limits: Mapping[str, Any]) -> dict[str, str]:
    """A sample's inputs, and every node's output as long as its model's max_tokens (`limits`) lets it be."""
    values = sample_inputs(graph, sample, mapping)
    values.update({name: "word " * int(limits.get(node.model) or 256) for name, node in graph.nodes.items()})
    return values


def repeated_heads(
    graph: Graph,
    method: Method,
    train: Sequence[Sample],
    mapping: Mapping[str, str],
    limits: Mapping[str, Any],
    judge: MetricSpec | None,
) -> dict[str, int]:
    """Characters at the start of each kind of call's prompt that every such call shares (caching.py): by model
    node, and `backward`, `optimizer` and `judge`; none without a training sample to render them with."""
    if not train:
        return {}
    values = bound_values(graph, train[0], mapping, limits)
    params = [p for p in graph.trainable if not method.only or p in method.only]
    heads = prefixes(graph, values, params, method.gradient == "sibling")
    if judge is not None:
        heads["judge"] = judge_prefix(graph, judge, values)
    return heads


def priced(llm: LLM, by_model: Mapping[str, Usage]) -> float | None:
    """Dollars these uses by model cost at most, by each model's price; None when one cannot be bounded."""
    cost: float | None = 0.0
    for model, used in by_model.items():
        price = (
            (llm.price(model, used.prompt_tokens, used.completion_tokens or 0) if configured(llm, model) else None)
            if used.calls
            else 0.0
        )
        cost = None if cost is None or price is None or used.completion_tokens is None else cost + price
    return cost


def totals(
    llm: LLM,
    uses: Sequence[tuple[str, str, Usage, str]],
    roles: Sequence[str],
    warning: Option | None,
    unforeseen: Sequence[str],
    steps: Sequence[str],
) -> Plan:
    """The plan of these uses (role, model, usage, and the strategy that makes them or LOOP), summed by role, by
    model and by strategy, priced by each model's price."""
    by_role: dict[str, Usage] = {role: Usage() for role in roles}
    by_model: dict[str, Usage] = {}
    by_step: dict[str, dict[str, Usage]] = {name: {} for name in (LOOP, *steps)}
    for role, model, used, step in uses:
        by_role[role] += used
        by_model[model] = by_model.get(model, Usage()) + used
        mine = by_step.setdefault(step, {})
        mine[model] = mine.get(model, Usage()) + used
    cost = priced(llm, by_model)
    names = {
        model: llm.model(model).name if configured(llm, model) else NO_MODEL
        for model, used in by_model.items()
        if used.calls
    }
    return Plan(
        {role: u.calls for role, u in by_role.items()},
        {role: u.completion_tokens for role, u in by_role.items()},
        {role: u.prompt_tokens for role, u in by_role.items()},
        cost,
        warning,
        tuple(unforeseen),
        {model: asdict(u) for model, u in by_model.items()},
        names,
        {
            name: {"calls": sum(u.calls for u in used.values()), "cost": priced(llm, used)}
            for name, used in by_step.items()
        },
    )


LEARNING_ROLES = ("backward", "optimizer")
LOOP = "loop"  # the forward passes (and a judge's calls) every step shares, in a plan's by-strategy lines
NO_MODEL = "(no model configured: a run stops before its first call)"


def configured(llm: LLM, model: str) -> bool:
    """Whether a role (or a named model) has a model to call. A plan calls none, so it counts the calls of a
    role that has none too, and says so."""
    try:
        llm.model(model)
    except LLMError:
        return False
    return True


def is_embedded(name: str) -> bool:
    """Whether the model `name` runs on this machine, as the transport that sends its calls says."""
    return bool(name) and serving(name)().capabilities(name).local


EMBEDDED_LEARNERS = "W013"  # its code (language/codes/warnings.py), which `sbpc explain` explains


def embedded_learners(names: Mapping[str, str]) -> str | None:
    """Why a run may learn little: its nodes call a remote model while backward or optimizer, named nowhere, fall
    to the embedded one, far too small to critique or rewrite that model's prompts. We warn rather than pick
    another model for them: sbpc cannot rank models, and choosing a paid one for the user would spend unasked."""
    learners = [role for role in LEARNING_ROLES if is_embedded(names.get(role, ""))]
    remote = sorted({name for key, name in names.items() if key not in LEARNING_ROLES and not is_embedded(name)})
    if not learners or not remote:
        return None
    return (
        f"{' and '.join(learners)} run{'s' if len(learners) == 1 else ''} on the embedded model "
        f"{names[learners[0]]} while the nodes call {', '.join(remote)}: a 135M model cannot do their work well. "
        f'Name a model for {" and ".join(learners)} (`model {learners[0]} {{ name = "..." }}` in the pipeline, '
        "or --model for every role)."
    )


def gate_warning(method: Method, samples: int) -> Option | None:
    """Why no step can pass the gate on this many samples, with what would let one, or None: a prompt step needs
    wins at gate_alpha (the most any gate of the run is tested at); a move to a cheaper model (objective cost)
    needs enough samples for non-inferiority at the first gate's level."""
    if method.gate == "none":
        return None
    size = Option("val_size", "--val-size") if method.gate == "val" else Option("train_size", "--train-size")
    needed = wins_needed(method.gate_alpha)
    if samples < needed:
        return worded(
            f"the gate split has {samples} samples, but a step needs at least {needed} wins and no loss to pass at "
            f"gate_alpha {method.gate_alpha:g}: no step can be accepted, and none is proposed after the first. "
            "Use a larger ",
            size,
            " (50 or more with a capable model), or a larger ",
            Option("gate_alpha", "--gate-alpha"),
            ".",
        )
    if all(step.margin() is None for step in strategies(method)):
        return None
    level = step_alpha(method.gate_alpha, 1, method.iterations, 0.0)
    least = NonInferiority(level, method.margin, samples).least_split()
    if least is not None and samples >= least:
        return None
    share = "" if level == method.gate_alpha else f", its share of gate_alpha {method.gate_alpha:g},"
    return worded(
        f"the gate split has {samples} samples, but a move to a cheaper model needs "
        f"{'more than 2,000' if least is None else f'at least {least}'} answered (every one a tie) to pass "
        f"non-inferiority at margin {method.margin:g} at the first gate's level {level:.3g}{share}: no such move "
        "can be accepted. Use a larger ",
        size,
        ", a larger ",
        Option("margin", "--margin"),
        " or ",
        Option("gate_alpha", "--gate-alpha"),
        ".",
    )
