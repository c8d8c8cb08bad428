"""The optimization loop: forward, backward, descent, gate, write-back, record; repeat.

The gate compares the proposed pipeline with the current one sample by sample on
the same split: a step is kept only when its wins (now right, was wrong) beat its
losses and a one-sided sign test on them gives p <= gate_alpha, so a small split
cannot let noise into the user's file. Samples lost to failed calls are neither
learnt from nor counted by the gate; they are reported.

Every iteration draws its randomness from (seed, iteration) alone and every model
call goes through the cache, so a resumed run starts from the prompts of its last
finished iteration and continues exactly as an uninterrupted run would have.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from ..language.diagnostics import Option, worded
from ..language.graph import Graph
from ..language.method import Method
from ..models.llm import LLM, BudgetExceeded, LLMError
from ..records.record import RunRecord
from ..runtime.datasets import Sample
from ..runtime.evaluate import Evaluation, evaluate, sample_inputs
from ..runtime.tasks import together
from .backward import backward, backward_calls
from .descent import Candidate, propose
from .stats import gate_passes, sign_test, wins_needed


@dataclass
class Iteration:
    index: int
    train_score: float | None  # None: every training sample was lost
    gate_before: float | None
    gate_after: float | None
    accepted: bool
    prompts: dict[str, str]  # the current prompts after this iteration
    candidates: list[dict] = field(default_factory=list)  # param, new, reply, fate (why taken or rejected)
    gradients: list[dict] = field(default_factory=list)  # per chosen sample: its id, expected answer, gradient per node
    gate: dict | None = None  # wins and losses (sample ids), p, alpha, and the ids the proposal got right
    lost: int = 0  # training samples lost to failed calls
    note: str = ""
    calls: int = 0
    tokens: int = 0
    cost: float = 0.0


@dataclass
class Outcome:
    graph: Graph
    best_score: float | None
    iterations: list[Iteration]
    stopped: str | None = None  # why the run ended early: a budget, or calls that cannot work (an Option)
    failed: bool = False  # stopped by a failure rather than a budget: the command exits non-zero
    test_before: Evaluation | None = None
    test_after: Evaluation | None = None


def right_and_lost(evaluation: Evaluation) -> tuple[set[str], set[str]]:
    """Ids of the samples a pipeline got right, and of those lost to failed calls."""
    lost = {r.sample.id for r in evaluation.results if r.trace.final.lost}
    return {r.sample.id for r in evaluation.results if r.correct}, lost


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
        metric: str,
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
        self.baseline: set[str] = set()  # gate samples the current pipeline gets right

    async def score(self, graph: Graph, samples: Sequence[Sample], what: str) -> Evaluation:
        evaluation = await evaluate(
            graph, self.llm, samples, self.metric, self.mapping, self.progress(what, len(samples))
        )
        if evaluation.stopped:
            raise BudgetExceeded(evaluation.stopped)
        if samples and evaluation.accuracy is None:  # a score made of failed calls is no score: stop, resumable
            causes = ", ".join(f"{cause} x{n}" for cause, n in evaluation.lost_causes().items())
            raise LLMError(f"every sample was lost, none scored ({what}): {causes}")
        return evaluation

    def gate_split(self) -> Sequence[Sample]:
        return self.train if self.method.gate == "train" else self.val

    async def run(self) -> Outcome:
        s, data = self.method, self.record.data
        # the record counts the run's calls over all its sessions: those before a resume, plus what this one
        # spends (the pipeline's ledger may also hold calls it made before this run)
        earlier, start = data.get("ledger"), self.llm.ledger.to_json()
        spent = lambda: combined(earlier, combined(self.llm.ledger.to_json(), start, -1))  # noqa: E731
        done = [Iteration(**it) for it in data["iterations"]]
        current = self.graph.with_prompts(done[-1].prompts) if done else self.graph
        outcome = Outcome(current, None, done)
        try:
            if s.gate != "none":
                if data["initial_score"] is None:
                    first = await self.score(self.graph, self.gate_split(), "gate, initial")
                    data["initial_score"], data["initial_right"] = first.accuracy, sorted(right_and_lost(first)[0])
                    self.record.save()
                outcome.best_score, self.baseline = data["initial_score"], set(data["initial_right"])
                for it in done:
                    if it.accepted and it.gate is not None:  # accepted by the gate, which is not "none"
                        outcome.best_score, self.baseline = it.gate_after, set(it.gate["right"])
                self.warn_if_no_step_can_pass()
            for index in range(len(done) + 1, s.iterations + 1):
                iteration = await self.step(index, outcome)
                outcome.iterations.append(iteration)
                data["iterations"].append(asdict(iteration))
                data["ledger"] = spent()
                self.record.save()
                self.log(self.describe(iteration))
            if self.test:
                outcome.test_before = await self.score(self.graph, self.test, "test, initial")
                outcome.test_after = await self.score(outcome.graph, self.test, "test, final")
        except BudgetExceeded as exc:
            outcome.stopped = exc.text
        except LLMError as exc:  # calls that cannot work: stop, keep what was found, let the user resume
            outcome.stopped, outcome.failed = exc.text, True
        # the record is read by `sbpc runs`, `show` and `report`: it says why in the command line's words
        data.update(finished=outcome.stopped is None, stopped=getattr(outcome.stopped, "cli", None), ledger=spent())
        if outcome.test_before is not None and outcome.test_after is not None:
            data["test"] = {
                "initial": outcome.test_before.accuracy,
                "final": outcome.test_after.accuracy,
                "samples": len(self.test),
            }
        self.record.save()
        return outcome

    async def step(self, index: int, outcome: Outcome) -> Iteration:
        s, current = self.method, outcome.graph
        rng = random.Random(f"{s.seed}:{index}")
        before = self.llm.ledger.calls, self.llm.ledger.tokens, self.llm.ledger.cost
        train = await self.score(current, self.train, f"iteration {index}: train")
        iteration = Iteration(index, train.accuracy, outcome.best_score, None, False, dict(current.prompts))
        failures = [r for r in train.results if not r.correct and not r.trace.final.lost]
        iteration.lost = sum(r.trace.final.lost for r in train.results)
        if not failures:
            iteration.note = "no training errors to learn from" + (
                f" ({iteration.lost} samples lost to failed calls)" if iteration.lost else ""
            )
            return self.finish(iteration, before)
        chosen = rng.sample(failures, min(s.errors_per_gradient, len(failures)))
        gradients = await self.each(
            f"iteration {index}: backward",
            chosen,
            lambda r: backward(current, self.llm, r.trace, r.expected, s.gradient),
        )
        iteration.gradients = [
            {
                "sample": r.sample.id,
                "expected": r.expected,
                "output": r.trace.output,
                "nodes": {n: g for n, g in grads.items() if g},
            }
            for r, grads in zip(chosen, gradients)
        ]
        samples = [(r.trace, g) for r, g in zip(chosen, gradients)]
        params = s.only or current.trainable
        candidates: list[Candidate] = await self.each(
            f"iteration {index}: optimizer", params, lambda p: propose(current, self.llm, p, samples)
        )
        valid = [c for c in candidates if c.new is not None]
        taken = valid if s.update == "full" else [c for c in valid if rng.random() < 0.5] or valid[:1]
        fate = {c.param: "taken" for c in taken}
        iteration.candidates = [
            {
                "param": c.param,
                "new": c.new,
                "reply": c.reply,
                "fate": fate.get(c.param, "rejected: " + (c.reason or "not sampled")),
            }
            for c in candidates
        ]
        if not taken:
            iteration.note = "no valid candidate"
            return self.finish(iteration, before)
        proposed = current.with_prompts({c.param: c.new for c in taken if c.new is not None})
        accept = s.gate == "none" or await self.passes_gate(proposed, iteration)
        if accept:
            outcome.graph = proposed
            outcome.best_score = iteration.gate_after
            iteration.accepted = True
            iteration.prompts = dict(proposed.prompts)
            self.on_accept(proposed)
        return self.finish(iteration, before)

    def warn_if_no_step_can_pass(self) -> None:
        """A gate split the current prompts already mostly get right leaves too few possible wins to pass."""
        size, alpha = len(self.gate_split()), self.method.gate_alpha
        possible, needed = size - len(self.baseline), wins_needed(alpha)
        if size >= needed > possible:
            self.log(
                f"warning: the current prompts answer {len(self.baseline)} of the {size} gate samples right, which "
                f"leaves {possible} possible wins; a step needs {needed} wins and no loss to pass at gate_alpha "
                f"{alpha:g}: no step can be accepted. Use a larger --val-size, or a larger --gate-alpha."
            )

    async def passes_gate(self, proposed: Graph, iteration: Iteration) -> bool:
        """Sample by sample on the gate split: wins must beat losses, and not by chance (sign test)."""
        evaluation = await self.score(proposed, self.gate_split(), f"iteration {iteration.index}: gate")
        right, lost = right_and_lost(evaluation)
        wins = sorted(right - self.baseline)
        losses = sorted(self.baseline - right - lost)  # a sample lost to a failed call says nothing about the prompts
        p = sign_test(len(wins), len(losses))
        accept = gate_passes(len(wins), len(losses), self.method.gate_alpha)
        iteration.gate_after = evaluation.accuracy
        iteration.gate = {
            "wins": wins,
            "losses": losses,
            "p": p,
            "alpha": self.method.gate_alpha,
            "lost": sorted(lost),
            "right": sorted(right),
        }
        if accept:
            self.baseline = right
        else:
            for c in iteration.candidates:
                if c["fate"] == "taken":
                    c["fate"] = f"rejected by the gate: {len(wins)} wins, {len(losses)} losses, p = {p:.3f}"
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
            verdict = "rejected by the gate"
        lines = [
            f"iteration {it.index}/{self.method.iterations}: train {it.train_score:.3f}, {verdict}; "
            f"{it.calls} calls, {it.tokens} tokens, ${it.cost:.4f}"
        ]
        if it.lost:
            lines.append(f"  {it.lost} training sample(s) lost to failed calls: not learnt from")
        if it.gate:
            g = it.gate
            passed = "passes" if it.accepted else "does not pass"
            lines.append(
                f"  gate: {it.gate_before:.3f} -> {it.gate_after:.3f}; {len(g['wins'])} wins, {len(g['losses'])} "
                f"losses, p = {g['p']:.3f} {'<=' if g['p'] <= g['alpha'] else '>'} {g['alpha']:g}: {passed}"
            )
        for c in it.candidates:
            lines.append(f"  {c['param']}: {c['fate']}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Plan:
    """The most a run can spend, before it spends anything (the formula of docs/optimize.md; retries not counted)."""

    calls: dict[str, int]
    completion_tokens: dict[str, int | None]  # None: the role has no max_tokens, so no bound
    prompt_tokens: dict[str, int]  # an estimate: 4 characters a token
    cost: float | None  # None: litellm cannot price a model, or a role has no max_tokens
    warning: str | None = None  # why the run cannot accept a step (an Option: the sizes as the caller gives them)

    def render(self) -> str:
        lines = [f"plan: at most {sum(self.calls.values())} calls (without retries)"]
        for role, calls in self.calls.items():
            completion = self.completion_tokens[role]
            bound = "no max_tokens: unbounded" if completion is None else f"at most {completion} completion tokens"
            lines.append(f"  {role:<9} {calls:>6} calls, about {self.prompt_tokens[role]} prompt tokens, {bound}")
        lines.append(
            "  cost: "
            + (
                "cannot be bounded (a model without a price or without max_tokens)"
                if self.cost is None
                else f"at most about ${self.cost:.4f}"
            )
        )
        return "\n".join(lines)


def plan(
    graph: Graph,
    llm: LLM,
    method: Method,
    train: Sequence[Sample],
    val: Sequence[Sample],
    test: Sequence[Sample],
    mapping: Mapping[str, str],
) -> Plan:
    """Calls per role: N x T training and N x G gate calls per iteration, E x H (or E x D) backward, P optimizer;
    once N x G for the initial gate score and 2 x N x S for the test split."""
    s, n = method, len(graph.nodes)
    gate = {"validation": len(val), "train": len(train), "none": 0}[s.gate]
    errors = min(s.errors_per_gradient, len(train))
    calls = {
        "forward": s.iterations * n * (len(train) + gate) + n * gate + 2 * n * len(test),
        "backward": s.iterations * errors * backward_calls(graph, s.gradient),
        "optimizer": s.iterations * len(s.only or graph.trainable),
    }
    limits = {role: llm.model(role).settings.get("max_tokens") if calls[role] else 0 for role in calls}
    completion = {role: None if (limit := limits[role]) is None else calls[role] * int(limit) for role in calls}
    # prompt sizes: the longest forward prompt over a few training samples, node outputs as long as allowed
    filler = "word " * int(limits["forward"] or 256)
    longest = 0
    for sample in train[:5]:
        values = {**sample_inputs(graph, sample, mapping), **{name: filler for name in graph.nodes}}
        longest = max([longest, *(len(node.render(values, graph.prompts)) for node in graph.nodes.values())])
    per_call = {
        "forward": longest // 4,
        "backward": longest // 4 + 200,
        "optimizer": errors * (longest // 4 + 100) + 300,
    }
    prompt = {role: calls[role] * per_call[role] for role in calls}
    cost: float | None = 0.0
    for role in calls:
        price = llm.price(role, prompt[role], completion[role] or 0) if calls[role] else 0.0
        cost = None if cost is None or price is None or completion[role] is None else cost + price
    return Plan(calls, completion, prompt, cost, gate_warning(method, gate))


def gate_warning(method: Method, samples: int) -> Option | None:
    """Why no step can pass the gate on this many samples, with what would let one, or None."""
    needed = wins_needed(method.gate_alpha)
    if method.gate == "none" or samples >= needed:
        return None
    size = Option("val_size", "--val-size") if method.gate == "validation" else Option("train_size", "--train-size")
    return worded(
        f"the gate split has {samples} samples, but a step needs at least {needed} wins and no loss to pass at "
        f"gate_alpha {method.gate_alpha:g}: no step can be accepted. Use a larger ",
        size,
        " (50 or more with a capable model), or a larger ",
        Option("gate_alpha", "--gate-alpha"),
        ".",
    )
