"""The optimization loop: forward, backward, descent, gate, write-back, record; repeat.

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
feedback gets no optimizer call.

Every iteration draws its randomness from (seed, iteration) alone and every model
call goes through the cache, so a resumed run starts from the prompts of its last
finished iteration and continues exactly as an uninterrupted run would have.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from ..errors import BUG_IN_SBPC, Option, SbpcError, worded
from ..language.demos import as_text
from ..language.graph import Graph, MetricSpec
from ..language.method import SETTINGS, Method
from ..language.shapes import node_shape
from ..models.llm import LLM, BudgetExceeded, LLMError
from ..records.record import Feedback, GateDecision, Iteration, Proposal, RunRecord, TestScores
from ..records.runs import gate_settled, gate_tally, gate_unreadable, train_words
from ..runtime.datasets import Sample
from ..runtime.evaluate import Evaluation, Result, Scorer, Verdict, evaluate, sample_inputs
from ..runtime.tasks import together
from .backward import backward, backward_calls, feedback_wanted
from .bootstrap import DemosCandidate, propose_demos
from .descent import Candidate, propose
from .gate import Gate
from .stats import wins_needed


@dataclass
class Known:
    """What the run knows of the current prompts, each a partial map filled by whatever evaluated them: `train`,
    their results on training samples (the traces a forward pass would give); `gate`, their scores on gate samples
    (the baseline a step must beat; a sample lost to failed calls scores 0). A sample not in a map is unknown."""

    prompts: dict[str, str]
    train: dict[str, Result] = field(default_factory=dict)
    gate: dict[str, float] = field(default_factory=dict)


@dataclass
class Outcome:
    graph: Graph
    best_score: float | None
    iterations: list[Iteration]
    stopped: str | None = None  # why the run ended early: a budget, or calls that cannot work (an Option)
    failed: bool = False  # stopped by a failure rather than a budget: the command exits non-zero
    test_before: Evaluation | None = None
    test_after: Evaluation | None = None
    unchanged: str | None = None  # why no step was kept, in words a newcomer follows (None: one was, or none ran)


NO_FEEDBACK = "no feedback reached it, so no optimizer call"
SAME_STEP = "the step the gate rejected in iteration {}, proposed again from the same prompts"
GATE_REJECTED = "rejected by the gate"  # a gated candidate's fate begins so, its tally after it


def scored(evaluation: Evaluation, what: str) -> Evaluation:
    """The evaluation, unless it holds samples and every one was lost: a score made of failed calls is no
    score, so the run stops there (resumable)."""
    if evaluation.results and evaluation.accuracy is None:
        causes = ", ".join(f"{cause} x{n}" for cause, n in evaluation.lost_causes().items())
        raise LLMError(f"every sample was lost, none scored ({what}): {causes}")
    return evaluation


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
    """Two ledgers (`Ledger.to_json`) added field by field, or `b` taken from `a` with sign=-1."""
    a, b = a or {}, b or {}
    return {
        key: combined(a.get(key), b.get(key), sign)
        if isinstance(a.get(key, b.get(key)), dict)
        else a.get(key, 0) + sign * b.get(key, 0)
        for key in {**a, **b}
    }


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

    async def score(self, graph: Graph, samples: Sequence[Sample], what: str) -> Evaluation:
        return scored(await self.evaluate(graph, samples, what), what)

    async def evaluate(self, graph: Graph, samples: Sequence[Sample], what: str) -> Evaluation:
        evaluation = await evaluate(
            graph, self.llm, samples, self.metric, self.mapping, self.progress(what, len(samples))
        )
        if evaluation.stopped:
            raise BudgetExceeded(evaluation.stopped)
        return evaluation

    def learn(self, graph: Graph, samples: Sequence[Sample], evaluation: Evaluation) -> None:
        """Results of the current prompts on one split (the training or the gate split, or both when the same),
        kept while the prompts stay."""
        if dict(graph.prompts) != self.known.prompts:
            return
        for result in evaluation.results:
            if samples is self.train:
                self.known.train[result.sample.id] = result
            if samples is self.gate_split():
                self.known.gate[result.sample.id] = 0.0 if result.lost else result.score

    def least(self, graph: Graph) -> int:
        """The fewest samples worth evaluating at once: a batch runs at once, so fewer saves no time."""
        return self.llm.concurrency // max(1, len(graph.nodes))

    def gate_split(self) -> Sequence[Sample]:
        return self.train if self.method.gate == "train" else self.val

    async def run(self) -> Outcome:
        s, data = self.method, self.record.data
        # the record counts the run's calls over all its sessions: those before a resume, plus what this one
        # spends (the pipeline's ledger may also hold calls it made before this run)
        earlier, start = data.ledger, self.llm.ledger.to_json()
        spent = lambda: combined(earlier, combined(self.llm.ledger.to_json(), start, -1))  # noqa: E731
        done = list(data.iterations)
        current = self.graph.with_prompts(done[-1].prompts) if done else self.graph
        outcome = Outcome(current, None, done)
        self.known = Known(dict(current.prompts))
        try:
            if s.gate != "none":
                if data.initial_score is None:
                    first = await self.score(self.graph, self.gate_split(), "gate, initial")
                    right, _, partial = outcomes(first)
                    data.initial_score, data.initial_right, data.initial_partial = (
                        first.accuracy,
                        sorted(right),
                        partial,
                    )
                    self.learn(self.graph, self.gate_split(), first)
                    self.record.save()
                else:  # resumed: the baseline the record keeps
                    right, partial, known = data.scores_kept()
                    ids = [sample.id for sample in self.gate_split() if known is None or sample.id in known]
                    self.known.gate = {i: 1.0 if i in right else partial.get(i, 0.0) for i in ids}
                outcome.best_score = data.best_score
                self.warn_if_no_step_can_pass()
            for index in range(len(done) + 1, s.iterations + 1):
                iteration = await self.step(index, outcome)
                outcome.iterations.append(iteration)
                data.iterations.append(iteration)
                data.ledger = spent()
                self.record.save()
                self.log(self.describe(iteration))
            if self.test:
                outcome.test_before = await self.score(self.graph, self.test, "test, initial")
                outcome.test_after = await self.score(outcome.graph, self.test, "test, final")
        except BudgetExceeded as exc:
            outcome.stopped = exc.text
        except LLMError as exc:  # calls that cannot work: stop, keep what was found, let the user resume
            outcome.stopped, outcome.failed = exc.text, True
        except Exception as exc:  # a bug in sbpc (or an error of the user's): the run so far is kept, then raised
            if not isinstance(exc, SbpcError):
                data.stopped = f"{BUG_IN_SBPC}: {type(exc).__name__}: {exc}"
            data.ledger = spent()
            self.record.save()
            raise
        if outcome.iterations and not any(it.accepted for it in outcome.iterations):
            outcome.unchanged = self.why_unchanged(outcome.iterations)
        # the record is read by `sbpc runs`, `show` and `report`: it says why in the command line's words
        data.finished, data.stopped, data.ledger = (
            outcome.stopped is None,
            getattr(outcome.stopped, "cli", None),
            spent(),
        )
        if outcome.test_before is not None and outcome.test_after is not None:
            data.test = TestScores(outcome.test_before.accuracy, outcome.test_after.accuracy, len(self.test))
        self.record.save()
        return outcome

    async def step(self, index: int, outcome: Outcome) -> Iteration:
        s, current = self.method, outcome.graph
        rng = random.Random(f"{s.seed}:{index}")
        before = self.llm.ledger.calls, self.llm.ledger.tokens, self.llm.ledger.cost
        demos = [d for d in current.trainable_demos if not s.only or d in s.only]
        had = len(self.known.train)
        if demos:  # a new set of demos is drawn from every right answer: the whole split is needed
            await self.forward(current, [x for x in self.train if x.id not in self.known.train], index)
        failures = await self.draw(current, index)
        known = tuple(self.known.train[x.id] for x in self.train if x.id in self.known.train)
        train = scored(Evaluation(known, len(known), None), f"iteration {index}: train")
        iteration = Iteration(index, train.accuracy, outcome.best_score, prompts=dict(current.prompts))
        iteration.train_samples, iteration.reused = len(train.results), len(train.results) == had
        iteration.lost = len(train.lost)
        if not failures and not demos:
            iteration.note = "no training errors to learn from" + (
                f" ({iteration.lost} samples lost to failed calls)" if iteration.lost else ""
            )
            return self.finish(iteration, before)
        params = [p for p in s.only or current.trainable if p not in current.demos]
        candidates: list[Candidate] = []
        fed: list[str] = []
        if failures and params:
            chosen = failures
            wanted = feedback_wanted(current, params)
            gradients = await self.each(
                f"iteration {index}: backward",
                chosen,
                lambda r: backward(
                    current, self.llm, r.trace, r.expected, s.gradient, wanted, Verdict(r.score, r.reason)
                ),
            )
            iteration.gradients = [
                Feedback(r.sample.id, r.expected, r.trace.output, {n: g for n, g in grads.items() if g})
                for r, grads in zip(chosen, gradients)
            ]
            samples = [(r.trace, g) for r, g in zip(chosen, gradients)]
            # a prompt no feedback reached would be rewritten from examples alone: not what the method asks for
            fed = [
                p
                for p in params
                if s.gradient == "none" or any(g.get(n.name) for g in gradients for n in current.users(p))
            ]
            if len(fed) < len(params):
                self.llm.ledger.count("optimizer calls skipped: no feedback", len(params) - len(fed))
            candidates = await self.each(
                f"iteration {index}: optimizer", fed, lambda p: propose(current, self.llm, p, samples)
            )
        draw = random.Random(f"{s.seed}:{index}:demos")  # its own stream: prompts draw as they did without demos
        sets = [propose_demos(current, d, train.results, draw) for d in demos]
        tried: list[Candidate | DemosCandidate] = [*candidates, *sets]
        valid = [c for c in tried if c.new is not None]
        taken = valid if s.update == "full" else [c for c in valid if rng.random() < 0.5] or valid[:1]
        fate = {c.param: "taken" for c in taken}
        iteration.candidates = [
            Proposal(c.param, fate.get(c.param, "rejected: " + (c.reason or "not sampled")), c.new, c.reply)
            for c in candidates
        ]
        iteration.candidates += [
            Proposal(p, f"skipped: {NO_FEEDBACK}", None, "") for p in params if p not in fed and failures
        ]
        iteration.candidates += [
            Proposal(
                c.param, fate.get(c.param, "rejected: " + (c.reason or "not sampled")), c.new, None, list(c.samples)
            )
            for c in sets
        ]
        if not taken:
            iteration.note = "no valid candidate"
            return self.finish(iteration, before)
        step = {c.param: c.new for c in taken if c.new is not None}
        rejected = rejected_before(outcome.iterations, iteration.prompts, step)
        if rejected is not None:
            iteration.note = SAME_STEP.format(rejected)
            for c in iteration.candidates:
                if c.fate == "taken":
                    c.fate = f"rejected: {iteration.note}"
            return self.finish(iteration, before)
        proposed = current.with_prompts(step)
        accept = s.gate == "none" or await self.passes_gate(current, proposed, iteration)
        if accept:
            outcome.graph = proposed
            outcome.best_score = iteration.gate_after
            iteration.accepted = True
            iteration.prompts = dict(proposed.prompts)
            self.on_accept(proposed)
            if s.gate == "none":
                self.known = Known(dict(proposed.prompts))
        return self.finish(iteration, before)

    async def forward(self, graph: Graph, samples: Sequence[Sample], index: int) -> None:
        """The current prompts on these training samples, their results kept."""
        if samples:
            self.learn(graph, self.train, await self.evaluate(graph, samples, f"iteration {index}: train"))

    async def draw(self, graph: Graph, index: int) -> list[Result]:
        """The errors an iteration learns from: the first k failures (lost samples are none) in a seeded order of
        the training split. Only samples of unknown outcome are evaluated, a batch at a time (the next unknown
        ones, as many as the failures still missing but at least `least`), until k are found or the split is
        done. A uniformly random order puts a uniformly random k of the failures first: the same odds as
        `random.sample(failures, k)`, without needing the whole list."""
        k = self.method.errors_per_gradient
        order = random.Random(f"{self.method.seed}:{index}:errors").sample(list(self.train), len(self.train))
        failures: list[Result] = []
        for n, sample in enumerate(order):
            if len(failures) == k:
                break
            if sample.id not in self.known.train:
                unknown = [x for x in order[n:] if x.id not in self.known.train]
                await self.forward(graph, unknown[: max(self.least(graph), k - len(failures))], index)
            result = self.known.train[sample.id]
            if not result.correct and not result.lost:
                failures.append(result)
        return failures

    def warn_if_no_step_can_pass(self) -> None:
        """A gate split the current prompts already mostly get right leaves too few possible wins to pass."""
        size, alpha = len(self.gate_split()), self.method.gate_alpha
        right = sum(score >= 1.0 for score in self.known.gate.values())
        possible, needed = size - right, wins_needed(alpha)
        if size >= needed > possible:
            self.log(
                f"warning: the current prompts answer {right} of the {size} gate samples right, which "
                f"leaves {possible} possible wins; a step needs {needed} wins and no loss to pass at gate_alpha "
                f"{alpha:g}: no step can be accepted. Use a larger {SETTINGS[f'{self.method.gate}_size'].option}, "
                "or a larger --gate-alpha."
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
            lines.append(
                f"  The gate runs the new prompts on the {size} {split} samples beside the current ones. A win is a "
                "sample only the new prompts get right, a loss one only the current prompts get right. A step is "
                f"kept when its wins beat its losses by more than chance (sign test, p <= {alpha:g}): that takes "
                f"at least {wins_needed(alpha)} wins and no loss. `sbpc show` has every candidate and its reply."
            )
        return "\n".join(lines)

    async def passes_gate(self, current: Graph, proposed: Graph, iteration: Iteration) -> bool:
        """Sample by sample on the gate split, in rounds until the decision is settled (gate.py): wins must beat
        losses, and not by chance (sign test). The current prompts are evaluated only where their unknown score
        could change the decision. What an accepted step's gate evaluated is what the run knows of its prompts."""
        s, split = self.method, self.gate_split()
        by_id = {sample.id: sample for sample in split}
        known = self.known.gate
        gate = Gate(
            list(by_id),
            {i for i, score in known.items() if score >= 1.0},
            s.gate_alpha,
            random.Random(f"{s.seed}:{iteration.index}:gate"),
            least=self.least(proposed),
            partial={i: score for i, score in known.items() if 0.0 < score < 1.0},
            known=set(known),
        )
        results: list[Result] = []

        async def play(graph: Graph, ids: list[str], what: str) -> Evaluation | None:
            return await self.evaluate(graph, [by_id[i] for i in ids], what) if ids else None

        while batch := gate.next_round():
            what = f"iteration {iteration.index}: gate, round {gate.rounds}"
            new, old = await together(
                [play(proposed, batch.proposal, what), play(current, batch.current, f"{what}, current prompts")]
            )
            if new is not None:
                gate.add(batch.proposal, *outcomes(new))
                results.extend(new.results)
            if old is not None:
                gate.add_current(batch.current, *outcomes(old))
                self.learn(current, split, old)
        accept = bool(gate.decision)
        unreadable = sorted(r.sample.id for r in results if r.trace.output is None and not r.trace.final.lost)
        tally = iteration.gate = GateDecision(**gate.to_json(), unreadable=unreadable)
        position = {sample_id: n for n, sample_id in enumerate(by_id)}
        results.sort(key=lambda r: position[r.sample.id])  # in the split's order, as a forward pass gives them
        evaluation = scored(Evaluation(tuple(results), len(results), None), f"iteration {iteration.index}: gate")
        if gate.used == gate.size:
            iteration.gate_after = evaluation.accuracy
        if accept:
            self.known = Known(dict(proposed.prompts))
            self.learn(proposed, split, evaluation)
        else:
            for c in iteration.candidates:
                if c.fate == "taken":
                    c.fate = f"{GATE_REJECTED}: {gate_tally(tally)}{gate_settled(tally)}"
        return accept

    async def each(self, what: str, items: Sequence, work: Callable) -> list:
        """`work` on every item at once, with a progress bar."""
        tick = self.progress(what, len(items))

        async def one(item):
            result = await work(item)
            tick(result)
            return result

        return await together(one(item) for item in items)

    def finish(self, iteration: Iteration, before: tuple[int, int, float]) -> Iteration:
        iteration.calls = self.llm.ledger.calls - before[0]
        iteration.tokens = self.llm.ledger.tokens - before[1]
        iteration.cost = self.llm.ledger.cost - before[2]
        return iteration

    def describe(self, it: Iteration) -> str:
        """What an iteration tried, what it kept and why, in words."""
        if it.accepted:
            verdict = "accepted"
        elif it.note:
            verdict = f"kept old ({it.note})"
        else:
            verdict = GATE_REJECTED
        lines = [
            f"iteration {it.index}/{self.method.iterations}: {train_words(it, len(self.train))}, {verdict}; "
            f"{it.calls} calls, {it.tokens} tokens, ${it.cost:.4f}"
        ]
        if it.lost:
            lines.append(f"  {it.lost} training sample(s) lost to failed calls: not learnt from")
        if it.gate:
            g = it.gate
            passed = "passes" if it.accepted else "does not pass"
            scores = "" if it.gate_after is None else f"{it.gate_before:.3f} -> {it.gate_after:.3f}; "
            lines.append(
                f"  gate: {scores}{gate_tally(g)} {'<=' if g.p <= g.alpha else '>'} {g.alpha:g}: {passed}"
                + gate_settled(g)
                + gate_unreadable(g)
            )
        for c in it.candidates:
            lines.append(
                f"  {c.param}: {c.fate}" + (f" (examples from samples {', '.join(c.samples)})" if c.samples else "")
            )
        return "\n".join(lines)


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

    def render(self) -> str:
        lines = [f"plan: at most {sum(self.calls.values())} calls (without retries)"]

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
        lines.append(
            "  cost: "
            + (
                "cannot be bounded (a model without a price or without max_tokens)"
                if self.cost is None
                else f"at most about ${self.cost:.4f}"
            )
        )
        lines.append(f"  {PROMPT_BOUND}")
        if self.unforeseen:
            lines.append("  fewer calls when: " + "; ".join(self.unforeseen))
        return "\n".join(lines)


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
    """Calls per role: N x T training and N x G gate calls per iteration (no training pass in the first when the
    gate is on the training split: the initial gate score is its forward pass; with the gate on validation, N x G
    more from the second on, for the current prompts where the run does not know their score), E x H (or E x D)
    backward, P optimizer; once N x G for the initial gate score and 2 x N x S for the test split. Each node's forward calls go to its own
    model; a `judge` metric asks its model once per answer scored (a node's count of calls). What the run may
    save beyond that depends on its answers, and is named in `unforeseen`."""
    s = method
    gate = {"val": len(val), "train": len(train), "none": 0}[s.gate]
    # each iteration evaluates the current prompts at most once per training sample (its error draw, and on the
    # training split the gate's unknown baselines); the first knows them all from the initial gate score on the
    # training split (a resumed run's first one replaces that score)
    train_passes = s.iterations - (s.gate == "train" and s.iterations > 0)
    baselines = max(0, s.iterations - 1) * gate if s.gate == "val" else 0
    errors = min(s.errors_per_gradient, len(train))
    params = [p for p in s.only or graph.trainable if p not in graph.demos]
    per_node = train_passes * len(train) + (s.iterations + 1) * gate + baselines + 2 * len(test)
    calls = {
        "backward": s.iterations * errors * backward_calls(graph, s.gradient, params),
        "optimizer": s.iterations * len(params),
    }
    unforeseen = [
        "an iteration without training errors or valid candidates (no backward, optimizer or gate calls)",
        "errors found before the end of the training split (its forward pass stops there)",
        "results of the current prompts the run already has (from the gate that accepted them, earlier iterations)",
        *(
            [
                "a gate settled before the end of its split (it stops there)",
                "a step the gate rejected before, proposed again from the same prompts (not gated again)",
            ]
            if s.gate != "none"
            else []
        ),
        *(["a prompt no feedback reaches (no optimizer call)"] if s.gradient != "none" else []),
        "answers from the response cache",
    ]
    models = {node.model for node in graph.model_nodes} | {role for role, n in calls.items() if n}
    models |= {judge.model} if judge is not None else set()
    limits = {model: llm.model(model).settings.get("max_tokens") for model in models}
    # prompt sizes: each node's longest forward prompt over a few training samples, node outputs as long as allowed,
    # and a trainable demos param as full as it may come to be, each example the sample's own
    longest = {node.name: 0 for node in graph.model_nodes}
    for sample in train[:5]:
        values = sample_inputs(graph, sample, mapping)
        values.update({name: "word " * int(limits.get(node.model) or 256) for name, node in graph.nodes.items()})
        prompts = {**graph.prompts}
        for name in graph.trainable_demos:
            spec = graph.demos[name]
            example = {key: values[key] for key in (*graph.nodes[spec.node].inputs, spec.node)}
            prompts[name] = as_text([example] * spec.max)
        for node in graph.model_nodes:
            longest[node.name] = max(longest[node.name], len(node.render(values, prompts)))
    widest = max(longest.values(), default=0)

    def usage(model: str, count: int, prompt_chars: int, shaped: bool = True) -> Usage:
        """A model's calls: a reply held to a grammar may take more than max_tokens (constraints.reply_tokens),
        a text node's may not."""
        if not count:
            return Usage()
        bound = llm.reply_tokens(model, shaped)
        return Usage(count, None if bound is None else count * int(bound), count * prompt_chars // 4)

    uses = [
        (
            "forward",
            node.model,
            usage(node.model, per_node, longest[node.name], node_shape(node.type, node.parse) is not None),
        )
        for node in graph.model_nodes
    ]
    uses.append(("backward", "backward", usage("backward", calls["backward"], widest + 800)))
    uses.append(("optimizer", "optimizer", usage("optimizer", calls["optimizer"], errors * (widest + 400) + 1200)))
    roles = ["forward", "backward", "optimizer"]
    if judge is not None:
        rubric = len(graph.prompts.get(judge.rubric or "", ""))
        output = longest.get(graph.output, widest)  # a function node's output: as long as the longest prompt
        uses.append(("judge", judge.model, usage(judge.model, per_node, output + rubric + 800)))
        roles.append("judge")
    by_role: dict[str, Usage] = {role: Usage() for role in roles}
    by_model: dict[str, Usage] = {}
    for role, model, used in uses:
        by_role[role] += used
        by_model[model] = by_model.get(model, Usage()) + used
    cost: float | None = 0.0
    for model, used in by_model.items():
        price = llm.price(model, used.prompt_tokens, used.completion_tokens or 0) if used.calls else 0.0
        cost = None if cost is None or price is None or used.completion_tokens is None else cost + price
    return Plan(
        {role: u.calls for role, u in by_role.items()},
        {role: u.completion_tokens for role, u in by_role.items()},
        {role: u.prompt_tokens for role, u in by_role.items()},
        cost,
        gate_warning(method, gate),
        tuple(unforeseen),
        {model: asdict(u) for model, u in by_model.items()},
    )


def gate_warning(method: Method, samples: int) -> Option | None:
    """Why no step can pass the gate on this many samples, with what would let one, or None."""
    needed = wins_needed(method.gate_alpha)
    if method.gate == "none" or samples >= needed:
        return None
    size = Option("val_size", "--val-size") if method.gate == "val" else Option("train_size", "--train-size")
    return worded(
        f"the gate split has {samples} samples, but a step needs at least {needed} wins and no loss to pass at "
        f"gate_alpha {method.gate_alpha:g}: no step can be accepted. Use a larger ",
        size,
        " (50 or more with a capable model), or a larger ",
        Option("gate_alpha", "--gate-alpha"),
        ".",
    )
