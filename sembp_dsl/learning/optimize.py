"""The optimization loop: forward, ask every strategy for candidates (strategies.py: semantic gradients, demos, models),
gate them as one step, write back, record; repeat.

What the run knows of the current prompts and their forward passes is samples.py's; the gate run over a step,
gating.py's (its decision, gate.py's); what the loop says of each iteration, summary.py's. Backward questions are asked
only where the feedback reaches an optimized prompt, and a prompt that received no feedback gets no optimizer call.

Every iteration draws its randomness from (seed, iteration) alone and every model
call goes through the cache, so a resumed run starts from the prompts of its last
finished iteration and continues exactly as an uninterrupted run would have.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from .. import telemetry
from ..errors import BUG_IN_SBPC, SbpcError
from ..language.blocks.method import Method
from ..language.graph.graph import Graph
from ..models.llm import LLM, BudgetExceeded, LLMError
from ..records.record import Iteration, Record, RunRecord, TestScores
from ..records.runs import fmt
from ..runtime.datasets import Sample
from ..runtime.evaluate import Evaluation, Scorer
from ..runtime.tasks import together
from .gating import GATE_REJECTED, NO_ANSWER, Gating
from .samples import Progress, Samples, scored
from .strategies import Candidate, Learnt, Proposed, strategies
from .summary import SAME_STEP, summary, why_unchanged


@dataclass
class Outcome:
    graph: Graph
    best_score: float | None
    record: Record  # the run record: its iterations are the run's
    stopped: str | None = None  # why the run ended early: a budget, or calls that cannot work (an Option)
    failed: bool = False  # stopped by a failure rather than a budget: the command exits non-zero
    test_before: Evaluation | None = None
    test_after: Evaluation | None = None
    unchanged: str | None = None  # why no step was kept, in words a newcomer follows (None: one was, or none ran)

    @property
    def iterations(self) -> list[Iteration]:
        return self.record.iterations


def rejected_before(iterations: Sequence[Iteration], prompts: Mapping[str, str], step: Mapping[str, str]) -> int | None:
    """The earlier iteration whose gate rejected exactly this step from exactly these prompts, if one did. Its
    decision is known: gating the step again would pay for an answer already given, and when replies are
    sampled it would give chance a second try at passing what failed once."""
    for it in iterations:
        if it.gate is not None and not it.accepted and it.prompts == prompts:
            if {c.param: c.new for c in it.candidates if c.fate.startswith(GATE_REJECTED)} == step:
                return it.index
    return None


def combined(a: dict | None, b: dict | None, sign: int = 1) -> dict:
    """Two ledgers (`Ledger.to_json`) added field by field, or `b` taken from `a` with sign=-1; a series over time
    (a list) is `b`'s after `a`'s, or with sign=-1 what `a` has past `b` (a ledger's series only grow)."""
    a, b = a or {}, b or {}

    def one(x, y):
        if isinstance(x if x is not None else y, dict):
            return combined(x, y, sign)
        if isinstance(x if x is not None else y, list):
            return (x or []) + (y or []) if sign > 0 else (x or [])[len(y or []) :]
        return (x or 0) + sign * (y or 0)

    return {key: one(a.get(key), b.get(key)) for key in {**a, **b}}


def forward_passes(method: Method, train: int, gate: int, test: int) -> int:
    """The most times the loop runs the pipeline, each model node once a time, on splits of these sizes: each
    iteration evaluates the current prompts at most once per training sample (its error draw, and on the training
    split the gate's unknown baselines; the first knows them all from the initial gate score on the training split,
    and a resumed run's first one replaces that score); its gate evaluates the proposal on the gate split, and on
    validation, from the second iteration on, the current prompts where the run does not know their score; then
    the initial gate score and, before and after, the test split."""
    train_passes = method.iterations - (method.gate == "train" and method.iterations > 0)
    baselines = max(0, method.iterations - 1) * gate if method.gate == "val" else 0
    return train_passes * train + (method.iterations + 1) * gate + baselines + 2 * test


def savings(method: Method) -> list[str]:
    """What the loop may save beyond `forward_passes` that no bound can count on: it depends on the answers."""
    return [
        "an iteration without training errors or valid candidates (no backward, optimizer or gate calls)",
        "errors found before the end of the training split (its forward pass stops there)",
        "results of the current prompts the run already has (from the gate that accepted them, earlier iterations)",
        *(
            [
                "a gate settled before the end of its split (it stops there)",
                "a step the gate rejected before, proposed again from the same prompts (not gated again)",
                "a gate split that leaves too few possible wins for any step to pass (no step proposed after the "
                "first)",
            ]
            if method.gate != "none"
            else []
        ),
    ]


class Optimizer:
    """One optimize run: its iterations, each learning from the training samples (samples.py), asking every strategy,
    and taking what they propose through the gate (gating.py) as one step; then the test split before and after."""

    def __init__(
        self,
        graph: Graph,
        llm: LLM,
        method: Method,
        metric: str | Scorer,
        mapping: Mapping[str, str],
        train: Sequence[Sample],
        val: Sequence[Sample],
        test: Sequence[Sample],
        record: RunRecord,
        on_accept: Callable[[Graph], None],
        log: Callable[[str], None],
        progress: Progress | None = None,
    ):
        self.graph, self.llm, self.method = graph, llm, method
        self.train, self.val, self.test = train, val, test
        self.record, self.on_accept, self.log = record, on_accept, log
        self.progress = progress or (lambda what, total: lambda done: None)
        self.strategies = strategies(method)
        self.samples = Samples(graph, llm, method, metric, mapping, (train, val), record, self.progress)
        self.gating = Gating(graph, llm, method, record, self.samples, self.strategies, log)
        self.start_said = False  # whether a summary has said the gate's starting score

    async def run(self) -> Outcome:
        """The run, in its span (telemetry.py): every iteration's, evaluation's and call's span is under it."""
        m = self.method
        asked = {
            "sbpc.pipeline": self.graph.pipeline.name,
            "sbpc.run": self.record.folder.name,
            **{f"sbpc.{name}": getattr(m, name) for name in ("iterations", "gradient", "gate", "gate_alpha", "seed")},
            **{
                f"sbpc.{name}_size": len(split)
                for name, split in (("train", self.train), ("val", self.val), ("test", self.test))
            },
        }
        with telemetry.span("optimize", asked) as span:
            outcome = await self.loop()
            ledger = self.llm.ledger
            span.set(
                {
                    "sbpc.best_score": outcome.best_score,
                    "sbpc.accepted": sum(it.accepted for it in outcome.iterations),
                    "sbpc.stopped": str(outcome.stopped) if outcome.stopped else None,
                    "sbpc.calls": ledger.calls,
                    "sbpc.cost_usd": ledger.cost,
                }
            )
            if outcome.failed:
                span.fail("stopped: calls that cannot work")
            return outcome

    async def loop(self) -> Outcome:
        """Iterations until the method's number, a budget or a failure; then the test split before and after."""
        data = self.record.data
        # the record counts the run's calls over all its sessions: those before a resume, plus what this one
        # spends (the pipeline's ledger may also hold calls it made before this run)
        earlier, start = data.ledger, self.llm.ledger.to_json()
        spent = lambda: combined(earlier, combined(self.llm.ledger.to_json(), start, -1))  # noqa: E731
        done = len(data.iterations)
        current = self.graph.with_prompts(data.iterations[-1].prompts) if done else self.graph
        outcome = Outcome(current, None, data)
        self.samples.reset(current.prompts)
        try:
            if self.method.gate != "none":
                self.baseline(done + 1, outcome)
            for index in range(done + 1, self.method.iterations + 1):
                iteration = await self.step(index, outcome)
                self.record.add_iteration(iteration, spent())
                self.log(summary(iteration, self.method.iterations, len(self.train), self.gate_start()))
            await self.initial_score(outcome)
            if (initial_gate := self.gate_start()) is not None:  # known only now: no gate ran before the end
                self.log(f"gate: the initial prompts scored {fmt(initial_gate)} on the gate split")
            if self.test:
                outcome.test_before = await self.samples.score(self.graph, self.test, "test, initial")
                outcome.test_after = await self.samples.score(outcome.graph, self.test, "test, final")
        except BudgetExceeded as exc:
            outcome.stopped = exc.text
        except LLMError as exc:  # calls that cannot work: stop, keep what was found, let the user resume
            outcome.stopped, outcome.failed = exc.text, True
        except Exception as exc:  # a bug in sbpc (or an error of the user's): the run so far is kept, then raised
            bug = None if isinstance(exc, SbpcError) else f"{BUG_IN_SBPC}: {type(exc).__name__}: {exc}"
            self.record.abort(spent(), bug)
            raise
        finally:
            self.samples.drop_initial()
        if outcome.iterations and not any(it.accepted for it in outcome.iterations):
            outcome.unchanged = why_unchanged(outcome.iterations, self.method, len(self.samples.gate_split()))
        before, after = outcome.test_before, outcome.test_after
        test = None if before is None or after is None else TestScores(before.accuracy, after.accuracy, len(self.test))
        self.record.finish(spent(), outcome.stopped, test)
        return outcome

    def gate_start(self) -> float | None:
        """The initial prompts' gate score, the first time a summary can say it (once it is known), else None."""
        start = self.record.data.initial_score
        if self.start_said or start is None:
            return None
        self.start_said = True
        return start

    def baseline(self, index: int, outcome: Outcome) -> None:
        """The initial prompts' gate score: read from the record by a resumed run, else started beside iteration
        `index` (samples.py)."""
        if self.samples.baseline(index):
            outcome.best_score = self.record.data.best_score
            self.gating.warn_if_no_step_can_pass()

    async def initial_score(self, outcome: Outcome) -> float | None:
        """The best score so far, once the initial gate score (if under way) is in."""
        if await self.samples.initial_in():
            outcome.best_score = self.record.data.best_score
            self.gating.warn_if_no_step_can_pass()
        return outcome.best_score

    async def step(self, index: int, outcome: Outcome) -> Iteration:
        """One iteration: learn from the training split, ask every strategy, and gate what they propose as one
        step; with what its calls cost."""
        with self.llm.ledger.account() as own, telemetry.span("iteration", {"sbpc.iteration": index}) as span:
            iteration = await self.attempt(index, outcome)  # its calls, not those of the initial score beside it
            iteration.spent(own.calls, own.prompt_tokens + own.completion_tokens, own.cost)
            span.set(
                {
                    "sbpc.accepted": iteration.accepted,
                    "sbpc.train_score": iteration.train_score,
                    "sbpc.candidates": len(iteration.candidates),
                    "sbpc.note": iteration.note or None,
                    "sbpc.calls": iteration.calls,
                    "sbpc.tokens": iteration.tokens,
                    "sbpc.cost_usd": iteration.cost,
                }
            )
        return iteration

    async def attempt(self, index: int, outcome: Outcome) -> Iteration:
        current = outcome.graph
        learnt = await self.study(index, current)
        iteration = Iteration(index, learnt.train.accuracy, prompts=dict(current.prompts))
        iteration.train_samples, iteration.reused = len(learnt.train.results), learnt.reused
        iteration.lost = len(learnt.train.lost)
        step = await self.proposal(learnt, iteration, outcome)
        iteration.gate_before = await self.initial_score(outcome)
        if step is None:
            return iteration
        proposed, margin = current.with_prompts(step[0]), step[1]
        if self.method.gate == "none" or await self.gating.passes_gate(current, proposed, iteration, margin):
            outcome.graph, outcome.best_score = proposed, iteration.gate_after
            iteration.accept(proposed.prompts)
            self.on_accept(proposed)
            if self.method.gate == "none":
                self.samples.reset(proposed.prompts)
        return iteration

    async def proposal(
        self, learnt: Learnt, iteration: Iteration, outcome: Outcome
    ) -> tuple[dict[str, str], float | None] | None:
        """The step the strategies propose from what the iteration learnt, and the margin it is gated at; None (with
        the iteration's note) when there is nothing to try."""
        if not any(strategy.learns_from(learnt) for strategy in self.strategies):
            iteration.note = "no training errors to learn from" + (
                f" ({iteration.lost} samples lost to failed calls)" if iteration.lost else ""
            )
            return None
        hopeless = self.samples.initial is None and self.gating.no_step_can_pass(
            learnt.index
        )  # after the first step (score in)
        if hopeless:
            iteration.note = f"no step can pass the gate: {hopeless}"
            return None
        taken, margin = await self.propose(learnt, iteration)
        if not taken:
            iteration.note = "no valid candidate"
            return None
        step = {c.param: c.new for c in taken if c.new is not None}
        rejected = rejected_before(outcome.record.iterations, iteration.prompts, step)
        if rejected is not None:
            iteration.note = SAME_STEP.format(rejected)
            iteration.reject_taken(f"rejected: {iteration.note}")
            return None
        return step, margin

    async def study(self, index: int, graph: Graph) -> Learnt:
        """What the iteration learns from: the current prompts' results on the training split (the whole split
        when a strategy needs it, else up to the errors), and the errors."""
        read = set(self.samples.known.train)  # the results the run had (not those still under way), then those it reads
        fresh = 0
        if any(strategy.whole_split(graph) for strategy in self.strategies):
            rest = [x for x in self.train if x.id not in read]
            fresh += await self.samples.forward(graph, rest, index)
            read.update(x.id for x in rest)
        failures, drawn = await self.samples.draw(graph, index, read)
        known = tuple(self.samples.known.train[x.id] for x in self.train if x.id in read)
        train = scored(Evaluation(known, len(known), None), f"iteration {index}: train")
        return Learnt(index, graph, train, failures, fresh + drawn == 0, self.rejected(), self.unanswering())

    def rejected(self) -> list[dict[str, str | None]]:
        """The steps the gate rejected earlier in the run: a strategy that searches need not try them again."""
        return [
            {c.param: c.new for c in it.candidates if c.fate.startswith(GATE_REJECTED)}
            for it in self.record.data.iterations
            if it.gate is not None and not it.accepted
        ]

    def unanswering(self) -> frozenset[str]:
        """The models a step moved to earlier in the run that did not answer: no move to them is worth a gate."""
        return frozenset(
            c.new
            for it in self.record.data.iterations
            if it.note.startswith(NO_ANSWER)
            for c in it.candidates
            if c.fate.startswith(GATE_REJECTED) and c.new is not None
        )

    async def propose(self, learnt: Learnt, iteration: Iteration) -> tuple[list[Candidate], float | None]:
        """Every strategy's candidates, each in the iteration's record with its fate and strategy; those the step
        takes (all valid ones, or with `update = sample` a seeded half of them, at least one), and the margin the
        step is gated at: a non-inferiority margin when every candidate taken came from a strategy with one."""
        answers = await self.answers(learnt)
        valid = [c for answer in answers for c in answer.candidates if c.new is not None]
        rng = random.Random(f"{self.method.seed}:{learnt.index}")
        taken = valid if self.method.update == "full" else [c for c in valid if rng.random() < 0.5] or valid[:1]
        fate = {c.param: "taken" for c in taken}
        iteration.gradients = [g for answer in answers for g in answer.gradients]
        iteration.candidates = [
            replace(proposal, strategy=strategy.name)
            for strategy, answer in zip(self.strategies, answers)
            for proposal in (
                *(c.proposal(fate.get(c.param, "rejected: " + (c.reason or "not sampled"))) for c in answer.candidates),
                *answer.skipped,
            )
        ]
        margins = {s.margin() for s, a in zip(self.strategies, answers) for c in a.candidates if c.param in fate}
        return taken, margins.pop() if len(margins) == 1 else None

    async def answers(self, learnt: Learnt) -> list[Proposed]:
        """Every strategy's answer, in the order of `self.strategies`. Those held to non-inferiority (a move to a
        cheaper model) are asked first, and when one proposes, its step is gated alone: taken with a rewritten
        prompt, it would have to score higher, so the others are not asked this iteration (nor spend)."""
        early = {
            s.name: await s.propose(learnt, self.llm, self.each) for s in self.strategies if s.margin() is not None
        }
        alone = any(c.new is not None for answer in early.values() for c in answer.candidates)
        return [
            early[s.name] if s.name in early else Proposed() if alone else await s.propose(learnt, self.llm, self.each)
            for s in self.strategies
        ]

    async def each(self, what: str, items: Sequence, work: Callable) -> list:
        """`work` on every item at once, with a progress bar."""
        tick = self.progress(what, len(items))

        async def one(item):
            result = await work(item)
            tick(result)
            return result

        return await together(one(item) for item in items)
