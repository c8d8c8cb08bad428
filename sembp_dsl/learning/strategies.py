"""What a step may change, one strategy for each kind of change: what it proposes, and what that may cost.

The loop (optimize.py) gives every strategy what an iteration learnt, takes their candidates together through the
gate, and keeps or rejects them as one step; the plan (plan.py) bounds a run by what the same strategies declare
they cost a step. Both ask the same objects, so a bound is derived from the code it bounds.

A strategy says which params it may change (`params`), whether it needs the current prompts' results on the whole
training split (`whole_split`; else the loop evaluates them only up to the errors it learns from), whether an
iteration gave it anything to learn from (`learns_from`), its candidates (`propose`), the calls one step may make of
each role it calls, with how long each prompt may be (`cost`), the savings no bound can count on
(`unforeseen`), the margin its steps are gated at (`margin`: None, they must score higher; a number, a
cheaper step need only not score lower by more than that, a non-inferiority test), and the dearer models it may
move a node to (`dearer`: the plan prices the node's calls at the dearest), and whether the prices it chooses by
are known (`check_priced`). To add one: a subclass of Strategy here (its `name` and `idle`, its `params` and
`propose`), and its name's line in language/blocks/method.py's STRATEGIES (what the `strategies` setting, the checker, the
editor and --help take, without importing this stage).
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from ..errors import Option
from ..language.blocks.method import STRATEGIES, Method, SettingError
from ..language.check.context import MODEL_ROLES
from ..language.diagnostics import suggestion_or_list
from ..language.graph.graph import Graph
from ..language.nodes.node import GraphNode, model_param
from ..models.llm import LLM
from ..records.record import Feedback, Proposal
from ..runtime.evaluate import Evaluation, Result, Verdict
from .backward import backward, backward_calls, feedback_wanted
from .bootstrap import propose_demos
from .descent import groups, propose, tools_chars

NO_FEEDBACK = "no feedback reached it, so no optimizer call"

#: `work` on every item at once, under a progress bar named by the text: the loop's, so every phase shows one.
Each = Callable[[str, Sequence[Any], Callable[[Any], Awaitable[Any]]], Awaitable[list]]


@dataclass(frozen=True)
class Learnt:
    """What an iteration knows when its strategies propose: the current prompts' results on the training samples
    it evaluated (`train`; every sample, when a strategy asked for the whole split), and the errors it learns from,
    the first failures in a seeded order of the split."""

    index: int
    graph: Graph
    train: Evaluation
    failures: Sequence[Result]
    reused: bool  # nothing was evaluated: the results the run had held them all
    rejected: Sequence[Mapping[str, str | None]] = ()  # the steps the gate rejected earlier in the run
    unanswering: frozenset[str] = frozenset()  # models a step moved to earlier in the run that did not answer


class Candidate(Protocol):
    """A new value for one param: `new` None when there is none to try, and `reason` says why."""

    @property
    def param(self) -> str: ...
    @property
    def new(self) -> str | None: ...
    @property
    def reason(self) -> str | None: ...
    def proposal(self, fate: str) -> Proposal: ...


@dataclass(frozen=True)
class Proposed:
    """A strategy's answer: its candidates, the params it asked no candidate for (already with their fate), and
    the feedback it learnt them from."""

    candidates: Sequence[Candidate] = ()
    skipped: Sequence[Proposal] = ()
    gradients: Sequence[Feedback] = ()


@dataclass(frozen=True)
class Scale:
    """What a step's cost depends on, known before a run: the graph, the training split's size, and the longest
    prompt a node may be sent (characters, every earlier node's reply as long as its max_tokens allows)."""

    graph: Graph
    train: int
    widest: int


@dataclass(frozen=True)
class Demand:
    """What one step may ask of a role: at most `calls` calls, each prompt at most `prompt_chars` characters."""

    role: str
    calls: int
    prompt_chars: int


@dataclass(frozen=True)
class Strategy:
    """One kind of change a step may make. A subclass names itself (`name`, its line in language/method.py's
    STRATEGIES) and says why it has nothing to change in a pipeline (`idle`); it must say which params it may change
    and what it proposes, and may override the rest, whose defaults are those of a strategy that makes no call of
    its own and is gated like any step. `strategies(method)` makes the subclass of each name the method names."""

    name: ClassVar[str]
    idle: ClassVar[str]  # why it has nothing to change in a pipeline (its params are none)
    method: Method

    def params(self, graph: Graph) -> list[str]:
        raise NotImplementedError

    async def propose(self, learnt: Learnt, llm: LLM, each: Each) -> Proposed:
        raise NotImplementedError

    def whole_split(self, graph: Graph) -> bool:
        return False

    def learns_from(self, learnt: Learnt) -> bool:
        return bool(self.params(learnt.graph))

    def cost(self, scale: Scale) -> tuple[Demand, ...]:
        return ()

    def unforeseen(self, graph: Graph) -> tuple[str, ...]:
        return ()

    def margin(self) -> float | None:
        return None

    def dearer(self, graph: Graph) -> Mapping[str, Sequence[str]]:
        return {}

    def check_priced(self, graph: Graph, llm: LLM) -> None:
        """SettingError when the prices its steps are chosen by are not known (before any call)."""


class SemanticGradients(Strategy):
    """The paper's step: the backward pass turns each error into feedback for every node (backward.py), and the
    optimizer model rewrites each prompt from the feedback its nodes received (descent.py); a tool's description
    is rewritten with its node's instruction, in one call, where both are trained."""

    name: ClassVar[str] = "gradients"
    idle: ClassVar[str] = "no prompt param to rewrite (each is frozen, or `only` names none)"

    def params(self, graph: Graph) -> list[str]:
        return [p for p in self.method.only or graph.trainable if p not in graph.demos]

    def learns_from(self, learnt: Learnt) -> bool:
        return bool(learnt.failures)

    async def propose(self, learnt: Learnt, llm: LLM, each: Each) -> Proposed:
        graph, failures, mode, params = learnt.graph, learnt.failures, self.method.gradient, self.params(learnt.graph)
        if not failures or not params:
            return Proposed()
        wanted = feedback_wanted(graph, params)
        gradients = await each(
            f"iteration {learnt.index}: backward",
            failures,
            lambda r: backward(graph, llm, r.trace, r.expected, mode, wanted, Verdict(r.score, r.reason)),
        )
        samples = [(r.trace, g) for r, g in zip(failures, gradients)]
        fed = fed_params(graph, params, failures, gradients, mode)
        if len(fed) < len(params):
            llm.ledger.count("optimizer calls skipped: no feedback", len(params) - len(fed))
        right = [r.trace for r in learnt.train.results if r.correct and not r.lost]
        answers = await each(
            f"iteration {learnt.index}: optimizer", groups(graph, fed), lambda g: propose(graph, llm, g, samples, right)
        )
        return Proposed(
            [candidate for answer in answers for candidate in answer],
            [Proposal(p, f"skipped: {NO_FEEDBACK}", None, "") for p in params if p not in fed],
            [
                Feedback(r.sample.id, r.expected, r.trace.output, {n: g for n, g in grads.items() if g})
                for r, grads in zip(failures, gradients)
            ],
        )

    def cost(self, scale: Scale) -> tuple[Demand, ...]:
        """Per error: a backward question per node whose hints reach an optimized prompt (each showing a node's
        prompt and its feedback); per optimized prompt: one optimizer call showing every error's example (and the
        tools whose descriptions it rewrites: fewer calls when one proposes several)."""
        errors = min(self.method.errors_per_gradient, scale.train)
        params = self.params(scale.graph)
        tools = max((tools_chars(scale.graph, group) for group in groups(scale.graph, params)), default=0)
        return (
            Demand("backward", errors * backward_calls(scale.graph, self.method.gradient, params), scale.widest + 800),
            Demand("optimizer", len(params), errors * (scale.widest + 400) + 1200 + tools),
        )

    def unforeseen(self, graph: Graph) -> tuple[str, ...]:
        return ("a prompt no feedback reaches (no optimizer call)",) if self.method.gradient != "none" else ()


def fed_params(
    graph: Graph, params: Sequence[str], failures: Sequence[Result], gradients: Sequence[Mapping[str, str]], mode: str
) -> list[str]:
    """The params worth an optimizer call: a prompt no feedback reached would be rewritten from examples alone (not
    what the method asks for), and one whose nodes ran on no error (a branch not taken) has no example of its work
    either."""
    ran = {p for p in params if any(r.trace.nodes[n.name].taken for r in failures for n in graph.users(p))}
    return [
        p
        for p in params
        if p in ran and (mode == "none" or any(g.get(n.name) for g in gradients for n in graph.users(p)))
    ]


class Demos(Strategy):
    """Demonstrations, as DSPy's BootstrapFewShot draws them: for every trainable demos param, a set drawn from the
    training samples the pipeline got right (bootstrap.py). No call: the examples are the forward pass's."""

    name: ClassVar[str] = "demos"
    idle: ClassVar[str] = "no node shows a demos param"

    def params(self, graph: Graph) -> list[str]:
        return [d for d in graph.trainable_demos if not self.method.only or d in self.method.only]

    def whole_split(self, graph: Graph) -> bool:
        """A set is drawn from every right answer."""
        return bool(self.params(graph))

    async def propose(self, learnt: Learnt, llm: LLM, each: Each) -> Proposed:
        draw = random.Random(f"{self.method.seed}:{learnt.index}:demos")  # its own stream: prompts draw alike
        graph, results = learnt.graph, learnt.train.results
        return Proposed([propose_demos(graph, d, results, draw) for d in self.params(graph)])


#: The call a model's price is compared by where a node's own is not known yet: tokens in and out of a typical call.
PRICED_CALL = (1000, 200)


def node_tokens(learnt: Learnt, node: str) -> tuple[int, int]:
    """The tokens in and out the node took on a training sample, on average over those the iteration evaluated (every
    call of a mapped node or a tool loop), else PRICED_CALL: what a move's price is ranked by. The model moved to
    may answer at another length; its measured cost decides (gating.py)."""
    traces = [t for r in learnt.train.results if not r.lost and (t := r.trace.nodes.get(node)) is not None]
    if not traces:
        return PRICED_CALL
    calls = [call for t in traces for call in (t, *t.items)]
    return (
        round(sum(c.prompt_tokens for c in calls) / len(traces)),
        round(sum(c.completion_tokens for c in calls) / len(traces)),
    )


@dataclass(frozen=True)
class Move:
    """A node moved to another named model: `param` is its model param (`draft.model`)."""

    param: str
    new: str | None
    reason: str | None
    old: str
    prices: tuple[float, float]  # the old model's and the new one's, of `tokens`
    tokens: tuple[int, int] = PRICED_CALL  # in and out, what the node took on a sample

    def proposal(self, fate: str) -> Proposal:
        return Proposal(
            self.param,
            fate,
            self.new,
            f"{self.old} -> {self.new} (${self.prices[0]:.6f} -> ${self.prices[1]:.6f} at the node's "
            f"{self.tokens[0]} + {self.tokens[1]} tokens a sample, by list price)",
        )


class Models(Strategy):
    """The model of each node as a param: a step moves one node to another of the models the method names
    (`models = [fast, strong]`). With objective cost, to a cheaper one, the cheapest first, held to
    non-inferiority at `margin`, and kept only when its measured cost per sample falls (gating.py); with objective
    accuracy, to a dearer one, held to the ordinary gate. A move the gate rejected is not proposed again in the run,
    nor any move to a model that did not answer: the next model in line is."""

    name: ClassVar[str] = "models"
    idle: ClassVar[str] = (
        "no node may move to another model; name the models a node with a model of its own (`model = fast`) "
        "may use: `models = [fast, strong]` in the optimize block or on the node, or --models"
    )

    def allowed(self, node: GraphNode) -> tuple[str, ...]:
        """The models a node may move to: its own `models` list, else the method's."""
        return node.models or self.method.models

    def params(self, graph: Graph) -> list[str]:
        """The model params of nodes that name a model of their own (the `model = ...` line write-back changes) and
        have models to move to."""
        named = [
            n
            for n in graph.model_nodes
            if n.model in graph.models and n.model not in MODEL_ROLES and set(self.allowed(n)) - {n.model}
        ]
        return [p for p in map(model_param, (n.name for n in named)) if not self.method.only or p in self.method.only]

    def learns_from(self, learnt: Learnt) -> bool:
        """Whether a node may move: what a move costs is known only once it is priced (`propose`)."""
        return bool(self.params(learnt.graph))

    async def propose(self, learnt: Learnt, llm: LLM, each: Each) -> Proposed:
        graph, cheaper = learnt.graph, self.method.objective == "cost"
        tried = {(param, model) for step in learnt.rejected for param, model in step.items()}
        moves = []
        for param in self.params(graph):
            node = graph.nodes[param.removesuffix(".model")]
            tokens = node_tokens(learnt, node.name)
            old, old_price = node.model, llm.price(node.model, *tokens)
            for new in self.allowed(node):
                new_price = llm.price(new, *tokens) if new in graph.models else None
                if old_price is None or new_price is None or (param, new) in tried or new in learnt.unanswering:
                    continue
                if (new_price < old_price) if cheaper else (new_price > old_price):
                    moves.append(Move(param, new, None, old, (old_price, new_price), tokens))
        if not moves:
            return Proposed()
        # the one that saves most at the node's own tokens first (with objective accuracy, the least dear first)
        best = min(moves, key=lambda m: (m.prices[1] - m.prices[0], m.prices[1]) if cheaper else (m.prices[1],))
        return Proposed([best])

    def cost(self, scale: Scale) -> tuple[Demand, ...]:
        """No call of its own: a move costs the gate's forward passes, counted by the loop."""
        return ()

    def unforeseen(self, graph: Graph) -> tuple[str, ...]:
        cheaper = self.method.objective == "cost" and self.params(graph)
        return ("a step that moves a node to a cheaper model (its forward calls cost less)",) if cheaper else ()

    def margin(self) -> float | None:
        return self.method.margin if self.method.objective == "cost" else None

    def dearer(self, graph: Graph) -> Mapping[str, Sequence[str]]:
        """With objective accuracy, every node that may move may move to any of the models (moves go up in price)."""
        if self.method.objective == "cost":
            return {}
        return {
            name: self.allowed(graph.nodes[name]) for name in (p.removesuffix(".model") for p in self.params(graph))
        }

    def check_priced(self, graph: Graph, llm: LLM) -> None:
        """SettingError when objective cost asks for cheaper models and no node it may move has a price for its own
        model and another: every move would be skipped unpriced, a run that only looks like one."""
        if self.method.objective != "cost" or not self.params(graph):
            return
        nodes = [graph.nodes[p.removesuffix(".model")] for p in self.params(graph)]
        named = sorted({m for n in nodes for m in (n.model, *self.allowed(n))})
        price = {m: llm.price(m, *PRICED_CALL) for m in named}
        if any(price[n.model] is not None and any(price[m] is not None for m in self.allowed(n)) for n in nodes):
            return
        unpriced = ", ".join(f"{m} ({llm.model(m).name})" for m in named if price[m] is None)
        raise SettingError(
            Option("objective='cost'", "--objective cost"),
            f": no model has a price to compare, so no move could be proposed: {unpriced} unknown to litellm's price "
            "table; declare input_price and output_price (dollars per million tokens) in their model blocks",
        )


def kind(name: str) -> type[Strategy]:
    """The strategy of a name in STRATEGIES: the subclass of Strategy that names itself so."""
    return {cls.name: cls for cls in Strategy.__subclasses__()}[name]


def strategies(method: Method) -> tuple[Strategy, ...]:
    """The strategies a run's steps use (the method's `strategies`), in the order their candidates are listed and
    drawn: that of STRATEGIES, whatever order the setting names them in."""
    return tuple(kind(name)(method) for name in STRATEGIES if name in method.strategies)


def check_acting(graph: Graph, method: Method) -> None:
    """SettingError when a model the method names is none of the file's (the checker's E071 for a flag's or a
    caller's list), none of the run's strategies has anything to change (it would spend its calls on nothing), or
    objective cost is asked of strategies none of which is held to non-inferiority (it would change nothing they
    do)."""
    steps = strategies(method)
    if method.objective == "cost" and all(step.margin() is None for step in steps):
        serving = [name for name in STRATEGIES if kind(name)(method).margin() is not None]
        raise SettingError(
            Option("objective='cost'", "--objective cost"),
            ": it moves nodes to cheaper models, which none of the strategies named does: add "
            f"{' or '.join(serving)} to strategies (now {', '.join(method.strategies)}), or leave the objective at "
            "accuracy",
        )
    unknown = [name for name in method.models if name not in graph.models]
    if unknown:
        raise SettingError(
            Option("models", "--models"),
            f": undefined model '{unknown[0]}': {suggestion_or_list(unknown[0], sorted(graph.models))}",
        )
    if not any(step.params(graph) for step in steps):
        why = "; ".join(f"{step.name}: {step.idle}" for step in steps)
        raise SettingError(Option("strategies", "--strategies"), f": nothing in this pipeline to change. {why}")


def check_priced(graph: Graph, method: Method, llm: LLM) -> None:
    """SettingError when a run's strategy chooses its steps by prices none of which is known: every step would be
    skipped unpriced, a run that only looks like one."""
    for step in strategies(method):
        step.check_priced(graph, llm)
