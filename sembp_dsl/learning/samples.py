"""The run's forward passes of the current prompts, and what it knows of their results.

No call without a use: what the run knows of the current prompts' results (a partial map, filled by whatever
evaluated them: the initial gate score, the gate that accepted them, earlier draws) is reused in memory, whatever the
cache and temperature, and nothing is evaluated only to complete it. The errors an iteration learns from are the
first failures in a seeded order of the training split, so only samples up to them are evaluated. The initial gate
score runs beside the first iteration's error draw (the draw reads the samples it scores first), and only the gate
waits for it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..language.blocks.method import Method
from ..language.graph.graph import Graph
from ..models.llm import LLM, BudgetExceeded, LLMError
from ..records.record import RunRecord
from ..runtime.datasets import Sample
from ..runtime.evaluate import Evaluation, Result, Scorer, evaluate
from .pricing import sample_costs

BATCH = 16  # model calls the loop starts at once where fewer could do: a gate round, an error draw
#: A progress bar: given what is under way and how many, the function each result is told to.
Progress = Callable[[str, int], Callable[[object], None]]


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


def scored(evaluation: Evaluation, what: str) -> Evaluation:
    """The evaluation, unless it holds samples and every one was lost: a score made of failed calls is no
    score, so the run stops there (resumable)."""
    if evaluation.results and evaluation.accuracy is None:
        causes = ", ".join(f"{cause} x{n}" for cause, n in evaluation.lost_causes().items())
        raise LLMError(f"every sample was lost, none scored ({what}): {causes}")
    return evaluation


def outcomes(evaluation: Evaluation) -> tuple[set[str], set[str], dict[str, float]]:
    """Ids of the samples a pipeline got right, of those lost (to failed calls, or unscored by their metric), and
    the scores between 0 and 1 of the rest (those not listed scored 0)."""
    lost = {r.sample.id for r in evaluation.results if r.lost}
    right = {r.sample.id for r in evaluation.results if r.correct and not r.lost}
    partial = {r.sample.id: r.score for r in evaluation.results if 0 < r.score < 1 and not r.lost}
    return right, lost, partial


class Samples:
    """The current prompts' forward passes on the run's splits: the training samples an iteration learns from (the
    whole split, or up to the errors it draws), the initial gate score (started beside the first iteration's draw),
    and what the run knows of their results (`known`), reused while the prompts stay."""

    def __init__(
        self,
        graph: Graph,
        llm: LLM,
        method: Method,
        metric: str | Scorer,
        mapping: Mapping[str, str],
        splits: tuple[Sequence[Sample], Sequence[Sample]],
        record: RunRecord,
        progress: Progress,
    ):
        self.graph, self.llm, self.method, self.metric, self.mapping = graph, llm, method, metric, mapping
        self.train, self.val = splits
        self.record, self.progress = record, progress
        self.known = Known(dict(graph.prompts))
        self.initial: asyncio.Future[None] | None = None  # the initial gate score, under way while iteration 1 learns
        self.pending: dict[str, asyncio.Future[None]] = {}  # training samples it is still evaluating

    def reset(self, prompts: Mapping[str, str]) -> None:
        """Nothing known: the current prompts are these now."""
        self.known = Known(dict(prompts))

    async def score(self, graph: Graph, samples: Sequence[Sample], what: str) -> Evaluation:
        return scored(await self.evaluate(graph, samples, what), what)

    async def evaluate(
        self, graph: Graph, samples: Sequence[Sample], what: str, done: Callable[[Result], None] | None = None
    ) -> Evaluation:
        """`graph` on the samples, each result told to `done` (else a progress bar) as it comes; BudgetExceeded when
        a budget stopped it."""
        told = done or self.progress(what, len(samples))
        evaluation = await evaluate(graph, self.llm, samples, self.metric, self.mapping, told, what)
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

    def baseline(self, index: int) -> bool:
        """What the gate's first step must beat: the initial prompts' score on the gate split, kept in the record;
        a resumed run reads it there. A new one is started, not awaited: iteration `index` learns meanwhile (its
        error draw waits only for the samples it reads, which go first), and its gate awaits the score
        (`initial_in`), so the score costs no model round trips of its own on the way to the first gate. True when
        the score is known now (read from the record)."""
        data = self.record.data
        split = self.gate_split()
        if data.initial_score is not None:
            right, partial, known, lost = data.scores_kept()
            ids = [x.id for x in split if (known is None or x.id in known) and x.id not in lost]
            self.known.gate = {i: 1.0 if i in right else partial.get(i, 0.0) for i in ids}
            self.known.costs = {i: cost for i, cost in data.costs_kept().items() if i in self.known.gate}
            return True
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
            evaluation = await self.evaluate(self.graph, order, "gate, initial", done)
            position = {x.id: n for n, x in enumerate(split)}
            results = tuple(sorted(evaluation.results, key=lambda r: position[r.sample.id]))
            score = scored(Evaluation(results, len(split), None), "gate, initial")
            right, lost, partial = outcomes(score)
            self.record.begin(score.accuracy, right, partial, lost, sample_costs(self.graph, self.llm, score))

        self.initial = asyncio.ensure_future(first())
        return False

    async def initial_in(self) -> bool:
        """Whether the initial gate score came in now (it was under way: awaited here, its failure raised)."""
        if self.initial is None:
            return False
        await self.initial
        self.initial = None
        return True

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
