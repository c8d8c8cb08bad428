"""The gate run over a step: the proposal and the current prompts evaluated round by round on the gate split until
the gate's decision (gate.py) is settled, a step chosen for cost measured, the models a step moves to on trial, and
whether any step can still pass.

The gate compares the proposed pipeline with the current one sample by sample on the same split: a step is kept only
when its wins (now right, was wrong) beat its losses and a one-sided sign test on them gives p <= gate_alpha, so a
small split cannot let noise into the user's file. Samples lost to failed calls are neither learnt from nor counted
by the gate; they are reported. The gate evaluates the current prompts only where their unknown score could change
its decision, and stops as soon as the decision is settled.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence

from .. import telemetry
from ..language.blocks.method import SETTINGS, Method
from ..language.graph.graph import Graph
from ..language.nodes.trace import CALL_FAILED
from ..models.llm import LLM, CallFailed, LLMError
from ..records.costs import Compared, compared, per_thousand
from ..records.record import GateDecision, Iteration, RunRecord
from ..records.runs import gate_settled, gate_tally
from ..runtime.datasets import Sample
from ..runtime.evaluate import Evaluation, Result
from ..runtime.tasks import together
from .gate import Gate
from .pricing import sample_costs
from .samples import Samples, outcomes, scored
from .stats import NonInferiority, step_alpha, wins_needed
from .strategies import Strategy

COST_SAMPLES = 16  # the fewest gate samples a step chosen for cost is measured on (paired: both pipelines on each)
GATE_REJECTED = "rejected by the gate"  # a gated candidate's fate begins so, its tally after it
NO_ANSWER = "the model it moves to does not answer"  # then the model, and the cause
COST_NOT_LOWER = "the gate passed it, but its measured cost per sample does not fall"  # then the figures


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


class Gating:
    """The gate over each step of a run: what the gate split's samples are evaluated on, at which level, against
    which baseline (the current prompts, or with a margin the pipeline the run started from), and what a step's
    evaluations tell the run of its prompts once it is kept."""

    def __init__(
        self,
        graph: Graph,
        llm: LLM,
        method: Method,
        record: RunRecord,
        samples: Samples,
        strategies: Sequence[Strategy],
        log: Callable[[str], None],
    ):
        self.graph, self.llm, self.method, self.record = graph, llm, method, record
        self.samples, self.strategies, self.log = samples, strategies, log

    def no_step_can_pass(self, index: int) -> str | None:
        """Why no step of iteration `index` can pass: a gate split too small for the wins a step needs at its level,
        or one the current prompts already mostly get right (while no step passes the prompts stay, and so does
        that); None when one can."""
        if self.method.gate == "none" or any(strategy.margin() is not None for strategy in self.strategies):
            return None  # a step held to non-inferiority passes with no win (warn_if_no_step_can_pass says when)
        size, level = len(self.samples.gate_split()), self.level(index)
        if level <= 0:
            return f"the run's gate_alpha {self.method.gate_alpha:g} is spent (each rejected step used its share)"
        least = wins_needed(level)
        needed = f"{least} win{'s' * (least != 1)} and no loss to pass at {self.level_words(level)}"
        right = sum(score >= 1.0 for score in self.samples.known.gate.values())
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
        if why is not None and len(self.samples.gate_split()) >= wins_needed(self.method.gate_alpha):
            self.log(
                f"warning: {why}: no step can be accepted, and no further step is proposed. Use a larger "
                f"{SETTINGS[f'{self.method.gate}_size'].option}, or a larger --gate-alpha."
            )
        margin = min((m for m in (strategy.margin() for strategy in self.strategies) if m is not None), default=None)
        if margin is not None and self.method.gate != "none":
            level, size = self.level(index), len(self.samples.gate_split())
            least = NonInferiority(level, margin, size).least_split()
            if least is None or size < least:
                self.log(
                    f"warning: the gate split has {size} samples, but a move to a cheaper model needs "
                    f"{'more than 2,000' if least is None else f'at least {least}'} answered on both sides (every "
                    f"one a tie) to pass non-inferiority at margin {margin:g} and "
                    f"{self.level_words(level)}: no such move can be accepted. Use a larger "
                    f"{SETTINGS[f'{self.method.gate}_size'].option}, a larger --margin or --gate-alpha."
                )

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
        s, split = self.method, self.samples.gate_split()
        held_out = self.held_out(iteration)
        by_id = {sample.id: sample for sample in split if sample.id not in held_out}
        known, before = (
            self.samples.known.gate,
            current,
        )  # `before`: the pipeline the step changes (its cost, its models)
        if margin is not None:  # against the pipeline the run started from: the margin bounds the run's whole loss
            current, known = self.start(), self.start_scores()
        gate = Gate(
            list(by_id),
            {i for i, score in known.items() if score >= 1.0},
            self.level(iteration.index),
            random.Random(f"{s.seed}:{iteration.index}:gate"),
            least=self.samples.least(proposed),
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
            self.samples.learn(current, split, Evaluation((result,), 1, None))
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
            self.samples.reset(proposed.prompts)
            self.samples.learn(proposed, split, evaluation)
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
        return {
            x.id: 1.0 if x.id in right else partial.get(x.id, 0.0)
            for x in self.samples.gate_split()
            if x.id not in lost
        }

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
            more = sorted((i for i in by_id if i not in ran), key=lambda i: i not in self.samples.known.costs)
            what = f"iteration {iteration.index}: cost of the step"
            extra = await self.samples.evaluate(proposed, [by_id[i] for i in more[: COST_SAMPLES - len(ran)]], what)
            evaluation = Evaluation(
                (*evaluation.results, *extra.results), len(evaluation.results) + extra.requested, None
            )
        after = sample_costs(proposed, self.llm, evaluation) or {}
        missing = [by_id[i] for i in after if i not in self.samples.known.costs]
        if deciding and missing:
            what = f"iteration {iteration.index}: cost of the current prompts"
            self.samples.learn(current, self.samples.gate_split(), await self.samples.evaluate(current, missing, what))
        measured = compared(self.samples.known.costs, after)
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
            tick = self.samples.progress(what, len(ids))

            def done(result: Result) -> None:
                tick(result)
                told(result)
                if gate.decision is not None:
                    settled.set()

            await self.samples.evaluate(graph, [by_id[i] for i in ids], what, done)

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
