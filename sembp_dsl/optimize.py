"""The optimization loop: forward, backward, descent, gate, write-back, record; repeat.

Every iteration draws its randomness from (seed, iteration) alone and every model
call goes through the cache, so a resumed run starts from the prompts of its last
finished iteration and continues exactly as an uninterrupted run would have.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import asdict, dataclass, field
from typing import Callable, Mapping, Sequence

from .backward import backward
from .datasets import Sample
from .descent import Candidate, propose
from .evaluate import Evaluation, evaluate
from .graph import Graph
from .llm import LLM, BudgetExceeded
from .record import RunRecord, Settings


@dataclass
class Iteration:
    index: int
    train_score: float
    gate_before: float | None
    gate_after: float | None
    accepted: bool
    prompts: dict[str, str]  # the current prompts after this iteration
    candidates: list[dict] = field(default_factory=list)
    note: str = ""
    calls: int = 0
    tokens: int = 0
    cost: float = 0.0


@dataclass
class Outcome:
    graph: Graph
    best_score: float | None
    iterations: list[Iteration]
    stopped: str | None = None
    test_before: Evaluation | None = None
    test_after: Evaluation | None = None


class Optimizer:
    def __init__(self, graph: Graph, llm: LLM, settings: Settings, metric: str, mapping: Mapping[str, str],
                 train: Sequence[Sample], val: Sequence[Sample], test: Sequence[Sample],
                 record: RunRecord, on_accept: Callable[[Graph], None], log: Callable[[str], None],
                 progress: Callable[[str, int], Callable[[object], None]] | None = None):
        self.graph, self.llm, self.settings, self.metric, self.mapping = graph, llm, settings, metric, mapping
        self.train, self.val, self.test = train, val, test
        self.record, self.on_accept, self.log = record, on_accept, log
        self.progress = progress

    async def score(self, graph: Graph, samples: Sequence[Sample], what: str) -> Evaluation:
        tick = self.progress(what, len(samples)) if self.progress else None
        evaluation = await evaluate(graph, self.llm, samples, self.metric, self.mapping, tick)
        if evaluation.stopped:
            raise BudgetExceeded(evaluation.stopped)
        return evaluation

    def gate_split(self) -> Sequence[Sample]:
        return self.train if self.settings.gate == "train" else self.val

    async def run(self) -> Outcome:
        s = self.settings
        done = [Iteration(**it) for it in self.record.data["iterations"]]
        current = self.graph.with_prompts(done[-1].prompts) if done else self.graph
        outcome = Outcome(current, None, done)
        try:
            if s.gate != "none":
                first = self.record.data["initial_score"]
                if first is None:
                    first = (await self.score(self.graph, self.gate_split(), "gate, initial")).accuracy
                    self.record.data["initial_score"] = first
                    self.record.save()
                outcome.best_score = first
                for it in done:
                    if it.accepted:
                        outcome.best_score = it.gate_after
            for index in range(len(done) + 1, s.iterations + 1):
                iteration = await self.step(index, outcome)
                outcome.iterations.append(iteration)
                self.record.data["iterations"].append(asdict(iteration))
                self.record.data["ledger"] = self.llm.ledger.to_json()
                self.record.save()
                self.log(self.describe(iteration, outcome))
            if self.test:
                outcome.test_before = await self.score(self.graph, self.test, "test, initial")
                outcome.test_after = await self.score(outcome.graph, self.test, "test, final")
        except BudgetExceeded as exc:
            outcome.stopped = str(exc)
        self.record.data.update(finished=outcome.stopped is None, stopped=outcome.stopped, ledger=self.llm.ledger.to_json())
        if outcome.test_after is not None:
            self.record.data["test"] = {"initial": outcome.test_before.accuracy, "final": outcome.test_after.accuracy}
        self.record.save()
        return outcome

    async def step(self, index: int, outcome: Outcome) -> Iteration:
        s, current = self.settings, outcome.graph
        rng = random.Random(f"{s.seed}:{index}")
        before = self.llm.ledger.calls, self.llm.ledger.tokens, self.llm.ledger.cost
        train = await self.score(current, self.train, f"iteration {index}: train")
        iteration = Iteration(index, train.accuracy, outcome.best_score, None, False, dict(current.prompts))
        failures = [r for r in train.results if not r.correct]
        if not failures:
            iteration.note = "no training errors to learn from"
            return self.finish(iteration, before)
        chosen = rng.sample(failures, min(s.errors_per_gradient, len(failures)))
        gradients = await asyncio.gather(*(backward(current, self.llm, r.trace, r.expected, s.gradient) for r in chosen))
        samples = [(r.trace, g) for r, g in zip(chosen, gradients)]
        params = s.only or current.trainable
        candidates: list[Candidate] = list(await asyncio.gather(*(propose(current, self.llm, p, samples) for p in params)))
        valid = [c for c in candidates if c.new is not None]
        taken = valid if s.update == "full" else [c for c in valid if rng.random() < 0.5] or valid[:1]
        fate = {c.param: "taken" for c in taken}
        iteration.candidates = [{"param": c.param, "new": c.new, "reply": c.reply,
                                 "fate": fate.get(c.param, "rejected: " + (c.reason or "not sampled"))} for c in candidates]
        if not taken:
            iteration.note = "no valid candidate"
            return self.finish(iteration, before)
        proposed = current.with_prompts({c.param: c.new for c in taken})
        if s.gate == "none":
            accept = True
        else:
            iteration.gate_after = (await self.score(proposed, self.gate_split(), f"iteration {index}: gate")).accuracy
            accept = iteration.gate_after > outcome.best_score
            if not accept:
                for c in iteration.candidates:
                    if c["fate"] == "taken":
                        c["fate"] = f"rejected by the gate: {iteration.gate_after:.3f} <= {outcome.best_score:.3f}"
        if accept:
            outcome.graph = proposed
            outcome.best_score = iteration.gate_after
            iteration.accepted = True
            iteration.prompts = dict(proposed.prompts)
            self.on_accept(proposed)
        return self.finish(iteration, before)

    def finish(self, iteration: Iteration, before: tuple[int, int, float]) -> Iteration:
        iteration.calls = self.llm.ledger.calls - before[0]
        iteration.tokens = self.llm.ledger.tokens - before[1]
        iteration.cost = self.llm.ledger.cost - before[2]
        return iteration

    def describe(self, it: Iteration, outcome: Outcome) -> str:
        gate = "" if it.gate_after is None else f"gate {it.gate_before:.3f} -> {it.gate_after:.3f}, "
        verdict = "accepted" if it.accepted else f"kept old ({it.note})" if it.note else "rejected"
        best = "" if outcome.best_score is None else f"best {outcome.best_score:.3f}, "
        return (f"iteration {it.index}/{self.settings.iterations}: train {it.train_score:.3f}, {gate}{best}{verdict}; "
                f"{it.calls} calls, {it.tokens} tokens, ${it.cost:.4f}")
