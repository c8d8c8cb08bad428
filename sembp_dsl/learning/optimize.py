"""The optimization loop: forward, ask every strategy for candidates (strategies.py: semantic gradients, demos, models),
gate them as one step, write back, record; repeat.

The gate compares the proposed pipeline with the current one sample by sample on
the same split: a step is kept only when its wins (now right, was wrong) beat its
losses and a one-sided sign test on them gives p <= gate_alpha, so a small split
cannot let noise into the user's file. Samples lost to failed calls are neither
learnt from nor counted by the gate; they are reported.

No call without a use: what the run knows of the current prompts' results (a
partial map, filled by whatever evaluated them: the initial gate score, the gate
that accepted them, earlier draws) is reused in memory, whatever the cache and
temperature, and nothing is evaluated only to complete it. The errors an
iteration learns from are the first failures in a seeded order of the training
split, so only samples up to them are evaluated; the gate evaluates the current
prompts only where their unknown score could change its decision, and stops as
soon as the decision is settled (gate.py); backward questions are asked only
where the feedback reaches an optimized prompt, and a prompt that received no
feedback gets no optimizer call. Nothing waits that need not: the initial gate
score runs beside the first iteration's error draw and questions (the draw reads
the samples it scores first) and only the gate waits for it.

Every iteration draws its randomness from (seed, iteration) alone and every model
call goes through the cache, so a resumed run starts from the prompts of its last
finished iteration and continues exactly as an uninterrupted run would have.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from .. import telemetry
from ..errors import BUG_IN_SBPC, SbpcError
from ..language.blocks.method import SETTINGS, Method
from ..language.graph.graph import Graph
from ..language.nodes.trace import CALL_FAILED
from ..models.llm import LLM, BudgetExceeded, CallFailed, LLMError
from ..records.costs import Compared, compared, per_thousand
from ..records.record import GateDecision, Iteration, Record, RunRecord, TestScores
from ..records.runs import fmt, gate_settled, gate_tally, gate_unreadable, noninferiority_words, step_cost, train_words
from ..runtime.datasets import Sample
from ..runtime.evaluate import Evaluation, Result, Scorer, evaluate
from ..runtime.tasks import together
from .gate import Gate
from .pricing import sample_costs
from .stats import NO_GAIN, NonInferiority, step_alpha, wins_needed
from .strategies import Candidate, Learnt, Proposed, strategies


@dataclass
class Known:
    """What the run knows of the current prompts, each a partial map filled by whatever evaluated them: `train`,
    their results on training samples (the traces a forward pass would give); `gate`, their scores on gate samples
    (the baseline a step must beat); `costs`, the dollars each gate sample cost them (what a step's cost is
    compared with, on the same samples). A sample not in a map is unknown, as is one they lost (to failed calls or
    the metric): counting it wrong would hand a step a free win."""

    prompts: dict[str, str]
    train: dict[str, Result] = field(default_factory=dict)
    gate: dict[str, float] = field(default_factory=dict)
    costs: dict[str, float] = field(default_factory=dict)


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


BATCH = 16  # model calls the loop starts at once where fewer could do: a gate round, an error draw
COST_SAMPLES = 16  # the fewest gate samples a step chosen for cost is measured on (paired: both pipelines on each)
SAME_STEP = "the step the gate rejected in iteration {}, proposed again from the same prompts"
GATE_REJECTED = "rejected by the gate"  # a gated candidate's fate begins so, its tally after it
NO_ANSWER = "the model it moves to does not answer"  # then the model, and the cause
COST_NOT_LOWER = "the gate passed it, but its measured cost per sample does not fall"  # then the figures


def scored(evaluation: Evaluation, what: str) -> Evaluation:
    """The evaluation, unless it holds samples and every one was lost: a score made of failed calls is no
    score, so the run stops there (resumable)."""
    if evaluation.results and evaluation.accuracy is None:
        causes = ", ".join(f"{cause} x{n}" for cause, n in evaluation.lost_causes().items())
        raise LLMError(f"every sample was lost, none scored ({what}): {causes}")
    return evaluation


def decided_on_too_little(gate: Gate, lost: Sequence[Result], what: str) -> None:
    """Stop the run when the gate lost most of the samples it evaluated (a rate limit, a failing metric): what is
    left is too little to judge a step on, and counting the lost ones as ties would let a handful decide. The
    run stops with the cause, resumable once the calls work again."""
    if len(gate.lost) * 2 > len(gate.evaluated):
        causes = Evaluation(tuple(lost), len(lost), None).lost_causes()
        raise LLMError(
            f"the gate lost {len(gate.lost)} of the {len(gate.evaluated)} samples it evaluated ({what}), so it "
            f"decides nothing: {', '.join(f'{cause} x{n}' for cause, n in causes.items())}"
        )


def new_models(current: Graph, proposed: Graph) -> set[str]:
    """The named models the proposal calls and the current pipeline does not: those a move is trying."""
    return {node.model for node in proposed.model_nodes} - {node.model for node in current.model_nodes}


def lost_to_move(current: Graph, proposed: Graph, results: Sequence[Result]) -> tuple[str, dict[str, int]] | None:
    """The model a step moved to, and the samples of the proposal lost to its failed calls, by cause; None when
    none was (or the step moved no node to a model the current pipeline does not call)."""
    trial = new_models(current, proposed)
    moved = [node for node in proposed.model_nodes if node.model in trial]
    causes: dict[str, int] = {}
    model = ""
    for result in results:
        failed = [t for n in moved if (t := result.trace.nodes.get(n.name)) and (t.error or "").startswith(CALL_FAILED)]
        if result.lost and failed:
            cause = failed[0].failure.cause if failed[0].failure else failed[0].error or CALL_FAILED
            causes[cause] = causes.get(cause, 0) + 1
            model = proposed.nodes[failed[0].node].model
    return (model, causes) if causes else None


def costs_less(iteration: Iteration, measured: Compared | None) -> bool:
    """Whether the step's measured cost per sample falls; when not, the iteration's note says so, with the
    figures."""
    if measured is not None and measured.falls:
        return True
    iteration.note = f"{COST_NOT_LOWER}: " + (measured.words() if measured else "its cost could not be measured")
    return False


def moved_failing(current: Graph, proposed: Graph, results: Sequence[Result], gate: Gate) -> tuple[str, str] | None:
    """The model a step moved to and why, when its failed calls lost most of the samples the gate evaluated."""
    own = lost_to_move(current, proposed, results)
    if own is None or 2 * sum(own[1].values()) <= len(gate.evaluated):
        return None
    causes = ", ".join(f"{cause} x{n}" for cause, n in own[1].items())
    return own[0], f"{sum(own[1].values())} of {len(gate.evaluated)} samples lost: {causes}"


def rejected_before(iterations: Sequence[Iteration], prompts: Mapping[str, str], step: Mapping[str, str]) -> int | None:
    """The earlier iteration whose gate rejected exactly this step from exactly these prompts, if one did. Its
    decision is known: gating the step again would pay for an answer already given, and when replies are
    sampled it would give chance a second try at passing what failed once."""
    for it in iterations:
        if it.gate is not None and not it.accepted and it.prompts == prompts:
            if {c.param: c.new for c in it.candidates if c.fate.startswith(GATE_REJECTED)} == step:
                return it.index
    return None


def outcomes(evaluation: Evaluation) -> tuple[set[str], set[str], dict[str, float]]:
    """Ids of the samples a pipeline got right, of those lost (to failed calls, or unscored by their metric), and
    the scores between 0 and 1 of the rest (those not listed scored 0)."""
    lost = {r.sample.id for r in evaluation.results if r.lost}
    right = {r.sample.id for r in evaluation.results if r.correct and not r.lost}
    partial = {r.sample.id: r.score for r in evaluation.results if 0 < r.score < 1 and not r.lost}
    return right, lost, partial


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
        progress: Callable[[str, int], Callable[[object], None]] | None = None,
    ):
        self.graph, self.llm, self.method, self.metric, self.mapping = graph, llm, method, metric, mapping
        self.train, self.val, self.test = train, val, test
        self.record, self.on_accept, self.log = record, on_accept, log
        self.progress = progress or (lambda what, total: lambda done: None)
        self.known = Known(dict(graph.prompts))
        self.strategies = strategies(method)
        self.initial: asyncio.Future[None] | None = None  # the initial gate score, under way while iteration 1 learns
        self.pending: dict[str, asyncio.Future[None]] = {}  # training samples it is still evaluating
        self.start_said = False  # whether a summary has said the gate's starting score

    async def score(self, graph: Graph, samples: Sequence[Sample], what: str) -> Evaluation:
        return scored(await self.evaluate(graph, samples, what), what)

    async def evaluate(self, graph: Graph, samples: Sequence[Sample], what: str) -> Evaluation:
        evaluation = await evaluate(
            graph, self.llm, samples, self.metric, self.mapping, self.progress(what, len(samples)), what
        )
        if evaluation.stopped:
            raise BudgetExceeded(evaluation.stopped)
        return evaluation

    def learn(self, graph: Graph, samples: Sequence[Sample], evaluation: Evaluation) -> None:
        """Results of the current prompts on one split (the training or the gate split, or both when the same),
        kept while the prompts stay."""
        if dict(graph.prompts) != self.known.prompts:
            return
        costs = sample_costs(graph, self.llm, evaluation) if samples is self.gate_split() else None
        for result in evaluation.results:
            if samples is self.train:
                self.known.train[result.sample.id] = result
            if samples is self.gate_split():
                if result.lost:
                    self.known.gate.pop(result.sample.id, None)
                else:
                    self.known.gate[result.sample.id] = result.score
                if costs is not None and result.sample.id in costs:
                    self.known.costs[result.sample.id] = costs[result.sample.id]

    def least(self, graph: Graph) -> int:
        """The fewest samples worth evaluating at once (a batch runs at once, so fewer saves little time): at most
        `BATCH` calls, fewer under a lower fixed concurrency, so what the loop spends never grows with it."""
        return min(self.llm.concurrency or BATCH, BATCH) // max(1, len(graph.nodes))

    def gate_split(self) -> Sequence[Sample]:
        return self.train if self.method.gate == "train" else self.val

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
        self.known = Known(dict(current.prompts))
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
                outcome.test_before = await self.score(self.graph, self.test, "test, initial")
                outcome.test_after = await self.score(outcome.graph, self.test, "test, final")
        except BudgetExceeded as exc:
            outcome.stopped = exc.text
        except LLMError as exc:  # calls that cannot work: stop, keep what was found, let the user resume
            outcome.stopped, outcome.failed = exc.text, True
        except Exception as exc:  # a bug in sbpc (or an error of the user's): the run so far is kept, then raised
            bug = None if isinstance(exc, SbpcError) else f"{BUG_IN_SBPC}: {type(exc).__name__}: {exc}"
            self.record.abort(spent(), bug)
            raise
        finally:
            self.drop_initial()
        if outcome.iterations and not any(it.accepted for it in outcome.iterations):
            outcome.unchanged = self.why_unchanged(outcome.iterations)
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
        """What the gate's first step must beat: the initial prompts' score on the gate split, kept in the record;
        a resumed run reads it there. A new one is started, not awaited: iteration `index` learns meanwhile (its
        error draw waits only for the samples it reads, which go first), and its gate awaits the score
        (`initial_score`), so the score costs no model round trips of its own on the way to the first gate."""
        data = self.record.data
        split = self.gate_split()
        if data.initial_score is not None:
            right, partial, known, lost = data.scores_kept()
            ids = [x.id for x in split if (known is None or x.id in known) and x.id not in lost]
            self.known.gate = {i: 1.0 if i in right else partial.get(i, 0.0) for i in ids}
            self.known.costs = {i: cost for i, cost in data.costs_kept().items() if i in self.known.gate}
            outcome.best_score = data.best_score
            self.warn_if_no_step_can_pass()
            return
        order = self.draw_order(index) if split is self.train else split
        if split is self.train:
            self.pending = {x.id: asyncio.get_running_loop().create_future() for x in split}
        tick = self.progress("gate, initial", len(split))

        def done(result: Result) -> None:
            tick(result)
            self.learn(self.graph, split, Evaluation((result,), 1, None))
            if result.sample.id in self.pending:
                self.pending.pop(result.sample.id).set_result(None)

        async def first() -> None:
            evaluation = await evaluate(self.graph, self.llm, order, self.metric, self.mapping, done, "gate, initial")
            if evaluation.stopped:
                raise BudgetExceeded(evaluation.stopped)
            position = {x.id: n for n, x in enumerate(split)}
            results = tuple(sorted(evaluation.results, key=lambda r: position[r.sample.id]))
            score = scored(Evaluation(results, len(split), None), "gate, initial")
            right, lost, partial = outcomes(score)
            self.record.begin(score.accuracy, right, partial, lost, sample_costs(self.graph, self.llm, score))

        self.initial = asyncio.ensure_future(first())

    async def initial_score(self, outcome: Outcome) -> float | None:
        """The best score so far, once the initial gate score (if under way) is in."""
        if self.initial is not None:
            await self.initial
            self.initial = None
            outcome.best_score = self.record.data.best_score
            self.warn_if_no_step_can_pass()
        return outcome.best_score

    def drop_initial(self) -> None:
        """A run that ends while the initial score is under way (a failure, a budget, Ctrl-C) stops it."""
        if self.initial is not None:
            if self.initial.done() and not self.initial.cancelled():
                self.initial.exception()  # already raised where it was awaited, or beside the failure that ended the run
            self.initial.cancel()
            self.initial = None
        self.pending = {}

    async def awaited(self, sample_ids: Sequence[str]) -> None:
        """Wait for the initial score's results on these training samples, or raise its failure."""
        futures = {self.pending[i] for i in sample_ids if i in self.pending}
        while futures and self.initial is not None:
            await asyncio.wait({*futures, self.initial}, return_when=asyncio.FIRST_COMPLETED)
            if self.initial.done():
                self.initial.result()  # a failure of the initial score ends the run here
            futures = {f for f in futures if not f.done()}

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
        if self.method.gate == "none" or await self.passes_gate(current, proposed, iteration, margin):
            outcome.graph, outcome.best_score = proposed, iteration.gate_after
            iteration.accept(proposed.prompts)
            self.on_accept(proposed)
            if self.method.gate == "none":
                self.known = Known(dict(proposed.prompts))
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
        hopeless = self.initial is None and self.no_step_can_pass(learnt.index)  # after the first step (score in)
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
        read = set(self.known.train)  # the results the run had (not those still under way), then those it reads
        fresh = 0
        if any(strategy.whole_split(graph) for strategy in self.strategies):
            rest = [x for x in self.train if x.id not in read]
            fresh += await self.forward(graph, rest, index)
            read.update(x.id for x in rest)
        failures, drawn = await self.draw(graph, index, read)
        known = tuple(self.known.train[x.id] for x in self.train if x.id in read)
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

    async def forward(self, graph: Graph, samples: Sequence[Sample], index: int) -> int:
        """The current prompts' results on these training samples, kept: those the run has not got evaluated,
        those the initial score is still evaluating waited for. Returns how many were evaluated."""
        fresh = [x for x in samples if x.id not in self.known.train and x.id not in self.pending]
        if fresh:
            self.learn(graph, self.train, await self.evaluate(graph, fresh, f"iteration {index}: train"))
        await self.awaited([x.id for x in samples])
        return len(fresh)

    def draw_order(self, index: int) -> list[Sample]:
        """The seeded order of the training split iteration `index` draws its errors in."""
        return random.Random(f"{self.method.seed}:{index}:errors").sample(list(self.train), len(self.train))

    async def draw(self, graph: Graph, index: int, read: set[str]) -> tuple[list[Result], int]:
        """The errors an iteration learns from: the first k failures (lost samples are none) in a seeded order of
        the training split. Only samples not `read` yet are read, a batch at a time (the next ones, as many as
        the failures still missing but at least `least`), until k are found or the split is done; `read` grows by
        them. A uniformly random order puts a uniformly random k of the failures first: the same odds as
        `random.sample(failures, k)`, without needing the whole list. Returns the failures and the samples
        evaluated for them."""
        k = self.method.errors_per_gradient
        order = self.draw_order(index)
        failures: list[Result] = []
        fresh = 0
        for n, sample in enumerate(order):
            if len(failures) == k:
                break
            if sample.id not in read:
                batch = [x for x in order[n:] if x.id not in read][: max(self.least(graph), k - len(failures))]
                fresh += await self.forward(graph, batch, index)
                read.update(x.id for x in batch)
            result = self.known.train[sample.id]
            if not result.correct and not result.lost:
                failures.append(result)
        return failures, fresh

    def no_step_can_pass(self, index: int) -> str | None:
        """Why no step of iteration `index` can pass: a gate split too small for the wins a step needs at its level,
        or one the current prompts already mostly get right (while no step passes the prompts stay, and so does
        that); None when one can."""
        if self.method.gate == "none" or any(strategy.margin() is not None for strategy in self.strategies):
            return None  # a step held to non-inferiority passes with no win (warn_if_no_step_can_pass says when)
        size, level = len(self.gate_split()), self.level(index)
        if level <= 0:
            return f"the run's gate_alpha {self.method.gate_alpha:g} is spent (each rejected step used its share)"
        least = wins_needed(level)
        needed = f"{least} win{'s' * (least != 1)} and no loss to pass at {self.level_words(level)}"
        right = sum(score >= 1.0 for score in self.known.gate.values())
        if size < least:
            return f"the gate split has {size} samples, but a step needs {needed}"
        if size - right < least:
            return (
                f"the current prompts answer {right} of the {size} gate samples right, which leaves {size - right} "
                f"possible wins; a step needs {needed}"
            )
        return None

    def level_words(self, level: float) -> str:
        """A step's level in words: gate_alpha itself, or its share of it."""
        alpha = self.method.gate_alpha
        return f"gate_alpha {alpha:g}" if level == alpha else f"{level:.3g} (its share of gate_alpha {alpha:g})"

    def warn_if_no_step_can_pass(self) -> None:
        """Said as soon as the initial score shows it, with what would give a step room (of a split too small
        whatever its scores, the plan has warned before the run). A move held to non-inferiority: when the split
        is smaller than the least on which any move can pass (stats.NonInferiority.least_split)."""
        index = len(self.record.data.iterations) + 1
        why = self.no_step_can_pass(index)
        if why is not None and len(self.gate_split()) >= wins_needed(self.method.gate_alpha):
            self.log(
                f"warning: {why}: no step can be accepted, and no further step is proposed. Use a larger "
                f"{SETTINGS[f'{self.method.gate}_size'].option}, or a larger --gate-alpha."
            )
        margin = min((m for m in (strategy.margin() for strategy in self.strategies) if m is not None), default=None)
        if margin is not None and self.method.gate != "none":
            level, size = self.level(index), len(self.gate_split())
            least = NonInferiority(level, margin, size).least_split()
            if least is None or size < least:
                self.log(
                    f"warning: the gate split has {size} samples, but a move to a cheaper model needs "
                    f"{'more than 2,000' if least is None else f'at least {least}'} answered on both sides (every "
                    f"one a tie) to pass non-inferiority at margin {margin:g} and "
                    f"{self.level_words(level)}: no such move can be accepted. Use a larger "
                    f"{SETTINGS[f'{self.method.gate}_size'].option}, a larger --margin or --gate-alpha."
                )

    def why_unchanged(self, iterations: Sequence[Iteration]) -> str:
        """What each iteration tried and how it fared, and what the gate asks: the story of a run that kept
        its old prompts, told to someone who has never seen a gate."""
        gated = [it for it in iterations if it.gate]
        lines = [f"no prompt changed: {'no step passed the gate' if gated else 'no candidate reached the gate'}."]
        for it in iterations:
            if it.gate:
                tried = [c.param for c in it.candidates if c.fate.startswith(GATE_REJECTED)]
                what = "1 new prompt tried" if len(tried) == 1 else f"{len(tried)} new prompts tried together"
                lines.append(
                    f"  iteration {it.index}: {what} ({', '.join(tried)}): {gate_tally(it.gate)} on the gate"
                    + gate_settled(it.gate)
                    + (f"; {it.note}" if it.note else "")
                )
                continue
            if it.note.startswith(SAME_STEP.partition("{")[0]):  # it tried a step whose gate had already said no
                lines.append(f"  iteration {it.index}: {it.note}")
                continue
            reasons: dict[str, int] = {}
            for c in it.candidates:
                reason = c.fate.removeprefix("rejected: ").split(" (")[0]
                reasons[reason] = reasons.get(reason, 0) + 1
            why = ", ".join(f"{reason} x{n}" for reason, n in reasons.items()) or it.note
            lines.append(f"  iteration {it.index}: nothing to try ({why})")
        if gated:
            size, alpha = len(self.gate_split()), self.method.gate_alpha
            split = "training" if self.method.gate == "train" else "validation"
            shared = (
                f" at its share of gate_alpha {alpha:g}, which the run's {self.method.iterations} iterations share "
                "(a rejected step uses its share up)"
                if self.method.iterations > 1
                else ""
            )
            rule = (
                "when its wins beat its losses (gate_alpha 1: by any number)"
                if alpha >= 1
                else f"when its wins beat its losses by more than chance (sign test, p <= {alpha:g}{shared}): that "
                f"takes at least {wins_needed(alpha)} wins and no loss, more at a smaller share"
            )
            lines.append(
                f"  The gate runs the new prompts on the {size} {split} samples beside the current ones. A win is a "
                "sample the new prompts score higher on, a loss one the current prompts score higher on. A step is "
                f"kept {rule}. `sbpc show` has every candidate and its reply."
            )
        return "\n".join(lines)

    def held_out(self, iteration: Iteration) -> set[str]:
        """With the gate on the training split, the samples the step's examples were taken from: each was answered
        right already, so in its own gate it could only tie or lose, and says nothing of whether the examples help
        elsewhere."""
        if self.method.gate != "train":
            return set()
        return {sample for c in iteration.candidates if c.fate == "taken" for sample in c.samples}

    async def passes_gate(
        self, current: Graph, proposed: Graph, iteration: Iteration, margin: float | None = None
    ) -> bool:
        """The gate, in its span: its decision and tally as attributes, the evaluations it ran under it."""
        asked: dict[str, telemetry.Value | None] = {
            "sbpc.gate": self.method.gate,
            "sbpc.gate_alpha": self.method.gate_alpha,
            "sbpc.margin": margin,
        }
        with telemetry.span("gate", asked) as span:
            accept = await self.gated(current, proposed, iteration, margin)
            tally = iteration.gate
            span.set({"sbpc.gate.decision": "accepted" if accept else "rejected"})
            if tally is not None:
                span.set(
                    {
                        "sbpc.gate.wins": len(tally.wins),
                        "sbpc.gate.losses": len(tally.losses),
                        "sbpc.gate.p": tally.p,
                        "sbpc.gate.samples": tally.samples,
                        "sbpc.gate.of": tally.of,
                        "sbpc.gate.rounds": tally.rounds,
                        "sbpc.gate.lost": len(tally.lost),
                    }
                )
            return accept

    async def gated(self, current: Graph, proposed: Graph, iteration: Iteration, margin: float | None = None) -> bool:
        """Sample by sample on the gate split, in rounds until the decision is settled (gate.py): wins must beat
        losses, and not by chance (sign test); with a `margin`, losses must be too few to lose that much accuracy. The current prompts are evaluated only where their unknown score
        could change the decision. What an accepted step's gate evaluated is what the run knows of its prompts."""
        s, split = self.method, self.gate_split()
        held_out = self.held_out(iteration)
        by_id = {sample.id: sample for sample in split if sample.id not in held_out}
        known, before = self.known.gate, current  # `before`: the pipeline the step changes (its cost, its models)
        if margin is not None:  # against the pipeline the run started from: the margin bounds the run's whole loss
            current, known = self.start(), self.start_scores()
        gate = Gate(
            list(by_id),
            {i for i, score in known.items() if score >= 1.0},
            self.level(iteration.index),
            random.Random(f"{s.seed}:{iteration.index}:gate"),
            least=self.least(proposed),
            partial={i: score for i, score in known.items() if 0.0 < score < 1.0},
            known=set(known),
            margin=margin,
        )
        results: list[Result] = []
        lost_current: list[Result] = []

        late: list[Result] = []  # the proposal's results that came after the decision: known, not counted

        def proposal_done(result: Result) -> None:
            (results if gate.decision is None else late).append(result)
            gate.add([result.sample.id], *outcomes(Evaluation((result,), 1, None)))

        def current_done(result: Result) -> None:
            self.learn(current, split, Evaluation((result,), 1, None))
            if gate.decision is None:
                lost_current.extend([result] if result.lost else [])
            gate.add_current([result.sample.id], *outcomes(Evaluation((result,), 1, None)))

        async def next_round() -> bool:
            batch = gate.next_round()
            if batch:
                what = f"iteration {iteration.index}: gate, round {gate.rounds}"
                await self.until_settled(
                    gate,
                    [
                        (proposed, batch.proposal, what, proposal_done),
                        (current, batch.current, f"{what}, current prompts", current_done),
                    ],
                    by_id,
                )
            return bool(batch)

        unanswered = await self.on_trial(before, proposed, next_round, results, gate)
        if unanswered is not None:
            return await self.unanswered(before, iteration, gate, *unanswered)
        decided_on_too_little(gate, [*lost_current, *(r for r in results if r.lost)], f"iteration {iteration.index}")
        accept = bool(gate.decision)
        unreadable = sorted(r.sample.id for r in results if r.trace.output is None and not r.trace.final.lost)
        tally = iteration.gate = GateDecision(
            **gate.to_json(),
            unreadable=unreadable,
            held_out=sorted(held_out),
            run_alpha=s.gate_alpha,
            baseline="start" if margin is not None else None,
        )
        # every result of the proposal, those after the decision too (not counted by it, but known), in the split's
        # order as a forward pass gives them: its score when it has the whole split
        position = {sample_id: n for n, sample_id in enumerate(by_id)}
        answered = sorted([*results, *late], key=lambda r: position[r.sample.id])
        evaluation = scored(Evaluation(tuple(answered), len(answered), None), f"iteration {iteration.index}: gate")
        if len(answered) == gate.size:
            iteration.gate_after = evaluation.accuracy
        accept, evaluation = await self.cost_decided(before, proposed, iteration, evaluation, by_id, accept, margin)
        if accept:
            self.known = Known(dict(proposed.prompts))
            self.learn(proposed, split, evaluation)
        else:
            iteration.reject_taken(f"{GATE_REJECTED}: {gate_tally(tally)}{gate_settled(tally)}")
        return accept

    def level(self, index: int) -> float:
        """The level iteration `index` tests its step at: gate_alpha spent over the run (stats.step_alpha), only
        rejected steps using theirs up, so the run accepts a step not truly better with chance at most gate_alpha."""
        spent = sum(it.gate.alpha for it in self.record.data.iterations if it.gate is not None and not it.accepted)
        return step_alpha(self.method.gate_alpha, index, self.method.iterations, spent)

    def start(self) -> Graph:
        """The pipeline the run started from (a resumed run's file holds its accepted steps)."""
        initial = self.record.data.initial_prompts
        return self.graph.with_prompts(initial) if initial else self.graph

    def start_scores(self) -> dict[str, float]:
        """The start's scores on the gate split, from the initial score (those it lost: unknown)."""
        data = self.record.data
        right, partial, lost = set(data.initial_right), data.initial_partial, set(data.initial_lost)
        return {x.id: 1.0 if x.id in right else partial.get(x.id, 0.0) for x in self.gate_split() if x.id not in lost}

    async def on_trial(
        self,
        current: Graph,
        proposed: Graph,
        next_round: Callable[[], Awaitable[bool]],
        results: Sequence[Result],
        gate: Gate,
    ) -> tuple[str, object] | None:
        """The gate's rounds, with the models the step moves to on trial (stops.py): the model and the cause when
        one of them could not be called at all, or its failed calls lost most of the samples the gate evaluated
        (said after the round that shows it: the rest would be lost alike); None when the gate could decide."""
        trial = new_models(current, proposed)
        try:
            with self.llm.stops.trying(trial):
                while await next_round():
                    if (failing := moved_failing(current, proposed, results, gate)) is not None:
                        return failing
        except LLMError as exc:  # a model on trial cannot be called at all (a bad key, an unknown model)
            if exc.model not in trial:
                raise
            return exc.model, exc.text
        return moved_failing(current, proposed, results, gate)

    async def cost_decided(
        self,
        before: Graph,
        proposed: Graph,
        iteration: Iteration,
        evaluation: Evaluation,
        by_id: Mapping[str, Sample],
        passed: bool,
        margin: float | None,
    ) -> tuple[bool, Evaluation]:
        """Whether the step is kept, the gate having `passed` it: a step chosen for cost (held to a `margin`) only
        when its measured cost per sample falls too. With the step's results, and any the measure added."""
        deciding = passed and margin is not None
        measured, evaluation = await self.cost_measured(before, proposed, iteration, evaluation, by_id, deciding)
        return (costs_less(iteration, measured) if deciding else passed), evaluation

    async def cost_measured(
        self,
        current: Graph,
        proposed: Graph,
        iteration: Iteration,
        evaluation: Evaluation,
        by_id: Mapping[str, Sample],
        deciding: bool,
    ) -> tuple[Compared | None, Evaluation]:
        """What 1,000 samples cost the step's pipeline and the current one on the gate samples both ran, kept in
        the iteration, and the step's results with any the measure added. When the step is to be decided on it
        (`deciding`: chosen for cost, and the gate passed it), both are measured on the same samples, at least
        COST_SAMPLES of them: the step is evaluated on more where its gate settled on fewer (one that cannot lose
        settles on none), the current pipeline where its cost is unknown."""
        if deciding and len(evaluation.results) < min(COST_SAMPLES, len(by_id)):
            ran = {r.sample.id for r in evaluation.results}
            more = sorted((i for i in by_id if i not in ran), key=lambda i: i not in self.known.costs)
            what = f"iteration {iteration.index}: cost of the step"
            extra = await self.evaluate(proposed, [by_id[i] for i in more[: COST_SAMPLES - len(ran)]], what)
            evaluation = Evaluation(
                (*evaluation.results, *extra.results), len(evaluation.results) + extra.requested, None
            )
        after = sample_costs(proposed, self.llm, evaluation) or {}
        missing = [by_id[i] for i in after if i not in self.known.costs]
        if deciding and missing:
            what = f"iteration {iteration.index}: cost of the current prompts"
            self.learn(current, self.gate_split(), await self.evaluate(current, missing, what))
        measured = compared(self.known.costs, after)
        iteration.costs = after
        iteration.per_1000 = per_thousand(after) if measured is None else measured.after
        if measured is not None:
            iteration.per_1000_before, iteration.per_1000_samples = measured.before, measured.samples
        return measured, evaluation

    async def unanswered(self, current: Graph, iteration: Iteration, gate: Gate, model: str, cause: object) -> bool:
        """The step moved a node to a model whose calls failed on most of its gate samples: the step's rejection,
        once the models the current pipeline uses answer a call past the cache (when they do not either, the
        failure is not the model's, and the run stops with it)."""
        for used in sorted({node.model for node in current.model_nodes}):
            try:
                await self.llm.probe("forward", used)
            except CallFailed as exc:
                raise LLMError(
                    f"the gate lost its samples to failed calls (iteration {iteration.index}: {cause}), and the "
                    f"model '{used}' the pipeline uses does not answer either: {exc}"
                ) from None
        iteration.gate = GateDecision(**gate.to_json())
        iteration.note = f"{NO_ANSWER} ('{model}'): {cause}"
        iteration.reject_taken(f"{GATE_REJECTED}: {iteration.note}")
        return False

    async def until_settled(
        self,
        gate: Gate,
        plays: Sequence[tuple[Graph, list[str], str, Callable[[Result], None]]],
        by_id: Mapping[str, Sample],
    ) -> None:
        """One gate round: each (pipeline, samples, what, told) evaluated at once, every result told as it
        arrives; once the gate's decision is settled the samples still in flight are cancelled (their calls
        with them: a reply already on its way still reaches the cache) and left unknown."""
        settled = asyncio.Event()

        async def play(graph: Graph, ids: list[str], what: str, told: Callable[[Result], None]) -> None:
            tick = self.progress(what, len(ids))

            def done(result: Result) -> None:
                tick(result)
                told(result)
                if gate.decision is not None:
                    settled.set()

            samples = [by_id[i] for i in ids]
            evaluation = await evaluate(graph, self.llm, samples, self.metric, self.mapping, done, what)
            if evaluation.stopped:
                raise BudgetExceeded(evaluation.stopped)

        work = asyncio.ensure_future(together(play(*p) for p in plays if p[1]))
        waiting = asyncio.ensure_future(settled.wait())
        try:
            await asyncio.wait({work, waiting}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
            if not work.done():
                work.cancel()
                await asyncio.wait({work})
        failed = None if work.cancelled() else work.exception()
        if failed is not None:
            raise failed  # a budget, a session unable to work
        if settled.is_set():
            gate.cancel()

    async def each(self, what: str, items: Sequence, work: Callable) -> list:
        """`work` on every item at once, with a progress bar."""
        tick = self.progress(what, len(items))

        async def one(item):
            result = await work(item)
            tick(result)
            return result

        return await together(one(item) for item in items)


def gate_rule(gate: GateDecision, passed: bool) -> str:
    """The gate's tally against its rule, in words that read right at every alpha: the sign test's p against
    alpha, or at alpha 1 (no test) that wins must beat losses; with partial credit, that the mean must rise."""
    if gate.test is not None:
        return f"{gate_tally(gate)}{noninferiority_words(gate)}: {'passes' if passed else 'does not pass'}"
    if gate.alpha >= 1:
        rule, mean = "; at gate_alpha 1 wins must beat losses", ", and the mean rise"
    else:
        rule, mean = f" {'<=' if gate.p <= gate.alpha else '>'} {gate.alpha:g}", ", but the mean must rise"
    if gate.gain is not None and gate.gain <= NO_GAIN:
        change = f"fall by {-gate.gain:.3f}" if gate.gain < 0 else "do not change"
        rule += f"{mean} (the scores {change} in all)"
    return f"{gate_tally(gate)}{rule}: {'passes' if passed else 'does not pass'}"


def summary(it: Iteration, iterations: int, train_size: int, gate_start: float | None = None) -> str:
    """What an iteration tried, what it kept and why, in words; `gate_start`: where the gate started (the initial
    prompts' score on its split), said beside the first iteration that knows it."""
    if it.accepted:
        verdict = "accepted"
    elif it.note:
        verdict = f"kept old ({it.note})"
    else:
        verdict = GATE_REJECTED
    lines = [
        f"iteration {it.index}/{iterations}: {train_words(it, train_size)}"
        + ("" if gate_start is None else f" (the gate starts at {fmt(gate_start)})")
        + f", {verdict}; {it.calls} calls, {it.tokens} tokens, ${it.cost:.4f}{step_cost(it)}"
    ]
    if it.lost:
        lines.append(f"  {it.lost} training sample(s) lost to failed calls: not learnt from")
    if it.gate and not it.note.startswith(NO_ANSWER):
        scores = "" if it.gate_after is None else f"{fmt(it.gate_before)} -> {fmt(it.gate_after)}; "
        passed = it.accepted or it.note.startswith(COST_NOT_LOWER)
        lines.append(f"  gate: {scores}{gate_rule(it.gate, passed)}" + gate_settled(it.gate) + gate_unreadable(it.gate))
        if it.gate.held_out:
            lines.append(f"  left out of the gate: {', '.join(it.gate.held_out)} (the step's examples came from them)")
    for c in it.candidates:
        lines.append(
            f"  {c.param}: {c.fate}"
            + (f" (examples from samples {', '.join(c.samples)})" if c.samples else "")
            + (f" [{c.strategy}]" if c.strategy else "")
        )
        lines += [f"    left out, as the file cannot hold it: sample {why}" for why in c.left_out]
    return "\n".join(lines)
