"""A world where the truth is known: the real `optimize` loop, run hundreds of times against an in-process model
whose every answer is drawn from a known probability, and what a user trusts measured against the truth.

The world (`World`): every sample has a hidden difficulty u (uniform); an instruction ("... Variant k.") has a
hidden accuracy; a node's answer is right when u, or with chance `rho` a draw of its own (so two instructions of
equal accuracy still disagree on some samples), falls below that accuracy plus its model's offset. Every draw is
keyed on (world seed, instruction, model, sample), so a question asked twice gets the same answer, and a
pipeline's true accuracy on the population is a formula, not an estimate. The optimizer proposes a new variant
whose accuracy is its parent's plus a normal step (mean `--shift`, sd `--spread`: some better, most worse). A
model may fail on a share of the samples (at random, or on the hardest: the sample is lost), and its replies
have a known length and price, so a pipeline's true cost per 1,000 samples is known too.

Two arms run on the same worlds (the same seeds):
- sbpc: its gate on the validation split at gate_alpha (spent over the run), non-inferiority for a cheaper model;
- the authors' rule (their experiments/*.py): a step is kept when it scores higher on the training batch
  (`--gate train --gate-alpha 1`); a move to a cheaper model when the batch does not score lower.

Measured: per step, how often an accepted step is not truly better (truly worse, for a cheaper model: worse by
more than the margin); per run, how often a run accepts any such step; power, how often a truly better step
(a cheaper model as good) is accepted; the true gain of the kept pipeline against the one the run reports;
the true and the reported cost per 1,000 samples.

    python bench/world.py [--runs 200] [--iterations 5] [--val 100] [--train 20]

The model is a MockTransport (models/mock.py): no socket, no cache, so a run of 5 iterations takes a fraction
of a second.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import sembp_dsl as sbp  # noqa: E402
from sembp_dsl.learning.stats import NonInferiority  # noqa: E402
from sembp_dsl.models import faults  # noqa: E402
from sembp_dsl.models import llm as llm_module  # noqa: E402
from sembp_dsl.models.mock import MockTransport, Sent  # noqa: E402
from sembp_dsl.models.transport import Reply  # noqa: E402

PROMPT_STEPS = """\
pipeline world "Answer the question"
input q: text
param task = "Answer Yes or No. Variant 0."
node answer: choice(Yes, No) { prompt = task }
q -> answer
output answer
metric exact
model forward { name = "openai/strong" }
model optimizer { name = "openai/optimizer" }
model backward { name = "openai/optimizer" }
"""

MODEL_MOVES = """\
pipeline world "Answer the question"
input q: text
param task = "Answer Yes or No. Variant 0."
node answer: choice(Yes, No) { prompt = task  model = strong }
q -> answer
output answer
metric exact
model forward { name = "openai/strong"  input_price = 5  output_price = 15 }
model strong { name = "openai/strong"  input_price = 5  output_price = 15 }
model fast { name = "openai/fast"  input_price = 0.5  output_price = 1.5 }
model optimizer { name = "openai/optimizer" }
model backward { name = "openai/optimizer" }
optimize { objective = cost  models = [fast, strong]  strategies = [models] }
"""

VARIANT = re.compile(r"Variant (\d+)\.")
QUESTION = re.compile(r"question (\d+)\b")


@dataclass(frozen=True)
class Model:
    """A model's known behaviour: accuracy offset, share of samples it fails on (`hard`: the hardest ones, else at
    random), reply length in tokens."""

    offset: float = 0.0
    fails: float = 0.0
    hard: bool = False
    reply_tokens: int = 1


@dataclass
class World:
    seed: int
    start: float = 0.6  # the first instruction's accuracy
    shift: float = -0.02  # a proposal's accuracy: its parent's plus N(shift, spread)
    spread: float = 0.05
    rho: float = 0.3  # the share of answers drawn apart from the sample's difficulty
    models: dict[str, Model] = field(default_factory=lambda: {"strong": Model(), "fast": Model()})
    quality: dict[int, float] = field(default_factory=dict)
    proposals: int = 0

    def __post_init__(self) -> None:
        self.quality[0] = self.start
        self.rng = random.Random(f"world:{self.seed}")

    def uniform(self, *key: object) -> float:
        return random.Random(f"{self.seed}:" + ":".join(map(str, key))).random()

    def accuracy(self, variant: int, model: str) -> float:
        """True accuracy on the population of the instruction on this model, a lost sample scoring 0."""
        m = self.models[model]
        acc = min(max(self.quality[variant] + m.offset, 0.0), 1.0)
        kept = 1 - m.fails
        if m.hard:  # lost: the samples of difficulty above 1 - fails, which the shared branch would get wrong first
            return (1 - self.rho) * min(acc, kept) + self.rho * acc * kept
        return acc * kept

    def answer(self, variant: int, model: str, sample: int) -> bool | None:
        """Right, wrong, or None: the call fails."""
        m = self.models[model]
        u = self.uniform("u", sample)
        if m.fails and ((u > 1 - m.fails) if m.hard else self.uniform("f", model, sample) < m.fails):
            return None
        acc = min(max(self.quality[variant] + m.offset, 0.0), 1.0)
        own = self.uniform("b", variant, model, sample) < self.rho
        return (self.uniform("v", variant, model, sample) if own else u) < acc

    def propose(self, parent: int) -> int:
        self.proposals += 1
        k = len(self.quality)
        self.quality[k] = min(max(self.quality[parent] + self.rng.gauss(self.shift, self.spread), 0.02), 0.98)
        return k

    def reply(self, request: Sent) -> Reply:
        prompt = request.prompt
        if "Reply with only the new instruction inside <prompt>" in prompt:
            parent = int(VARIANT.findall(prompt)[0])
            return Reply(f"<prompt>Answer Yes or No. Variant {self.propose(parent)}.</prompt>", 100, 10, 0.0, "stop")
        if "# Feedback on the output" in prompt:
            return Reply("Hint 1: say more.", 100, 5, 0.0, "stop")
        model = request.model.removeprefix("openai/")
        variant, sample = int(VARIANT.findall(prompt)[0]), int(QUESTION.findall(prompt)[0])
        right = self.answer(variant, model, sample)
        if right is None:
            raise faults.CallError("context_length_exceeded", 400)
        truth = "Yes" if sample % 2 else "No"
        said = truth if right else ("No" if truth == "Yes" else "Yes")
        return Reply(said, 40, self.models[model].reply_tokens, 0.0, "stop")

    def per_1000(self, model: str) -> float:
        """True dollars 1,000 samples cost on this model (40 prompt tokens a call, its reply length)."""
        prices = {"strong": (5.0, 15.0), "fast": (0.5, 1.5)}[model]
        m = self.models[model]
        return 1000 * (40 * prices[0] + m.reply_tokens * prices[1]) / 1e6 * (1 - m.fails)


def rows(n: int, start: int) -> list[dict]:
    return [{"q": f"question {i}", "answer": "Yes" if i % 2 else "No"} for i in range(start, start + n)]


@dataclass
class Tally:
    """What one arm did over many runs."""

    steps: int = 0  # gated steps
    accepted: int = 0
    false: int = 0  # accepted, not truly better (a cheaper model: worse by more than the margin)
    better: int = 0  # gated, truly better (a cheaper model: within the margin)
    found: int = 0  # accepted of those
    big: int = 0  # gated, better by 0.05 or more
    big_found: int = 0  # accepted of those
    runs: int = 0
    runs_false: int = 0  # runs that accepted any step not truly better
    true_gain: list[float] = field(default_factory=list)
    reported_gain: list[float] = field(default_factory=list)
    true_cost: list[float] = field(default_factory=list)
    reported_cost: list[float] = field(default_factory=list)

    def rate(self, k: int, n: int) -> str:
        return f"{k / n:.3f} ({k}/{n})" if n else "-"


def run_once(source: str, world: World, arm: str, args: argparse.Namespace, folder: Path) -> object:
    """One optimize run in the world; returns its Optimized."""
    mock = MockTransport(world.reply)
    llm_module.serving = lambda name: lambda: mock  # type: ignore[assignment]
    path = folder / "world.sbp"
    path.write_text(source)
    settings = {"gate": "val", "gate_alpha": args.alpha} if arm == "sbpc" else {"gate": "train", "gate_alpha": 1.0}
    train = rows(args.train, 0)
    val = rows(args.val, 10_000)
    with sbp.load(path, cache=False) as pipeline:
        return pipeline.optimize(
            train, val, iterations=args.iterations, runs_dir=folder / "runs", seed=world.seed, **settings
        )


def prompt_steps(args: argparse.Namespace, arm: str, folder: Path) -> Tally:
    """Prompt rewrites: each step must be better; true accuracies of every variant known."""
    tally = Tally()
    for seed in range(args.runs):
        world = World(seed, shift=args.shift, spread=args.spread)
        found = run_once(PROMPT_STEPS, world, arm, args, folder)
        record = found.outcome.record  # type: ignore[attr-defined]
        current, any_false = 0, False
        for it in record.iterations:
            if it.gate is None:
                continue
            step = [c for c in it.candidates if c.new is not None and c.fate != "rejected: not sampled"]
            if not step:
                continue
            new = int(VARIANT.findall(step[0].new)[0])
            before, after = world.accuracy(current, "strong"), world.accuracy(new, "strong")
            tally.steps += 1
            tally.better += after > before
            tally.big += after >= before + 0.05
            if it.accepted:
                tally.accepted += 1
                tally.found += after > before
                tally.big_found += after >= before + 0.05
                tally.false += after <= before
                any_false |= after <= before
                current = new
        tally.runs += 1
        tally.runs_false += any_false
        tally.true_gain.append(world.accuracy(current, "strong") - world.start)
        best, initial = record.best_score, record.initial_score
        if arm != "sbpc":  # the authors' run reports its training batch score
            best, initial = _train_scores(record)
        if best is not None and initial is not None:
            tally.reported_gain.append(best - initial)
    return tally


def _train_scores(record) -> tuple[float | None, float | None]:
    """The training batch's score before the first step and after the last accepted one (the authors' report)."""
    kept = [it for it in record.iterations if it.accepted]
    return (kept[-1].gate_after if kept else record.initial_score), record.initial_score


CASES: dict[str, Callable[[], dict[str, Model]]] = {
    "as good, 5% discordance each way": lambda: {"strong": Model(), "fast": Model(0.0)},
    "exactly at the margin (0.05 worse)": lambda: {"strong": Model(), "fast": Model(-0.05)},
    "0.10 worse": lambda: {"strong": Model(), "fast": Model(-0.10)},
    "fails on 45% at random": lambda: {"strong": Model(), "fast": Model(0.0, 0.45)},
    "fails on its 30% hardest": lambda: {"strong": Model(), "fast": Model(0.0, 0.30, hard=True)},
    "as good, 200-token replies": lambda: {"strong": Model(), "fast": Model(0.0, reply_tokens=200)},
}


def model_moves(args: argparse.Namespace, arm: str, case: str, folder: Path) -> Tally:
    """A move to a cheaper model: kept only when not worse by more than the margin (0.05) than the start."""
    tally = Tally()
    for seed in range(args.runs):
        world = World(seed, rho=0.08, models=CASES[case]())
        found = run_once(MODEL_MOVES, world, arm, argparse.Namespace(**{**vars(args), "iterations": 1}), folder)
        record = found.outcome.record  # type: ignore[attr-defined]
        loss = world.accuracy(0, "strong") - world.accuracy(0, "fast")
        tally.runs += 1
        for it in record.iterations:
            if it.gate is None:
                continue
            tally.steps += 1
            good = loss < 0.05 - 1e-9
            tally.better += good
            if it.accepted:
                tally.accepted += 1
                tally.found += good
                tally.false += not good
                tally.runs_false += not good
                if it.per_1000 is not None:
                    tally.true_cost.append(world.per_1000("fast"))
                    tally.reported_cost.append(it.per_1000)
    return tally


def old_test(losses: int, samples: int, margin: float, alpha: float) -> bool:
    """The test before issue 43: an exact binomial on the losses alone, n the whole split, a lost sample a tie."""
    p = sum(math.comb(samples, k) * margin**k * (1 - margin) ** (samples - k) for k in range(losses + 1))
    return p <= alpha


def binary(rng: random.Random, win: float, loss: float, right: float = 0.6) -> tuple[float, float]:
    """A sample's (start, step) scores: a win, a loss, or both right or both wrong."""
    r = rng.random()
    if r < win:
        return 0.0, 1.0
    if r < win + loss:
        return 1.0, 0.0
    return (1.0, 1.0) if rng.random() < right else (0.0, 0.0)


def one_sample(rng: random.Random, case: str, margin: float) -> tuple[float, float | None]:
    """A sample's (start, step) scores in one case of `TEST_CASES`; the step's None: lost (in use, a 0)."""
    if case == "equal accuracy, 5% discordance each way":
        return binary(rng, 0.05, 0.05)
    if case == "at the margin, 5% and 10% discordance":
        return binary(rng, 0.05, 0.05 + margin)
    if case == "at the margin, 30% lost at random":  # the answered ones better, so that in all it is at the margin
        before, after = binary(rng, (0.221 - margin) / 0.88, 0.05)  # 0.7 E[step] - E[start] = -margin
        return before, None if rng.random() < 0.3 else after
    if case == "at the margin, the hardest 30% lost":  # lost where both are wrong: the truth does not move
        if rng.random() < 0.3:
            return 0.0, None
        return binary(rng, 0.05 / 0.7, (0.05 + margin) / 0.7, right=1.0)
    before = 0.2 + 0.6 * rng.random()  # partial credit: the step's score lower by the margin, give or take 0.15
    return before, before - margin + 0.3 * (rng.random() - 0.5)


TEST_CASES = (
    "equal accuracy, 5% discordance each way",
    "at the margin, 5% and 10% discordance",
    "at the margin, 30% lost at random",
    "at the margin, the hardest 30% lost",
    "partial credit, at the margin",
)


def test_alone(case: str, trials: int, n: int, margin: float, alpha: float) -> tuple[float, float, float]:
    """(truth: the step's true loss, sbpc's accept rate, the old test's accept rate) for one case."""
    rng = random.Random(f"test:{case}")
    rule = NonInferiority(alpha, margin, n)
    new = old = 0
    truth = 0.0
    for _ in range(trials):
        pairs = [one_sample(rng, case, margin) for _ in range(n)]
        answered = [(b, a) for b, a in pairs if a is not None]
        up = sum(max(a - b, 0.0) for b, a in answered)
        down = sum(max(b - a, 0.0) for b, a in answered)
        new += rule.passes(up, down, len(answered), n - len(answered))
        old += old_test(sum(1 for b, a in answered if a < b), n, margin, alpha)
        truth += sum((a or 0.0) - b for b, a in pairs) / n
    return truth / trials, new / trials, old / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--val", type=int, default=100)
    parser.add_argument("--train", type=int, default=20)
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--shift", type=float, default=-0.02)
    parser.add_argument("--spread", type=float, default=0.05)
    parser.add_argument("--trials", type=int, default=4000)
    parser.add_argument("--only-test", action="store_true", help="the test alone, not the runs")
    args = parser.parse_args()
    shm = Path("/dev/shm")  # run records are written with fsync: in memory, a run waits on no disk
    print(f"the non-inferiority test alone: n = {args.val}, margin 0.05, alpha {args.alpha}, {args.trials} trials")
    print("case                                        true change  sbpc accepts  before issue 43")
    for case in TEST_CASES:
        truth, new, old = test_alone(case, args.trials, args.val, 0.05, args.alpha)
        print(f"{case:43} {truth:+.3f}       {new:.3f}         {old:.3f}")
    print()
    if args.only_test:
        return
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp:
        folder = Path(tmp)
        print(f"prompt steps: {args.runs} runs of {args.iterations} iterations, train {args.train}, val {args.val}")
        print(
            "arm      steps  accepted  not better/accepted  runs with one   power (better)  power (+0.05)  "
            "true gain  reported"
        )
        for arm in ("sbpc", "authors"):
            t = prompt_steps(args, arm, folder)
            print(
                f"{arm:8} {t.steps:5}  {t.accepted:8}  {t.rate(t.false, t.accepted):19}  "
                f"{t.rate(t.runs_false, t.runs):14}  {t.rate(t.found, t.better):14}  {t.rate(t.big_found, t.big):13}  "
                f"{statistics.mean(t.true_gain):+.3f}     "
                f"{statistics.mean(t.reported_gain) if t.reported_gain else float('nan'):+.3f}"
            )
        print(f"\na cheaper model, margin 0.05: {args.runs} runs each, val {args.val}")
        print("case                                 arm      accepted  true cost/1k  reported cost/1k")
        for case in CASES:
            for arm in ("sbpc", "authors"):
                t = model_moves(args, arm, case, folder)
                cost = (
                    f"${statistics.mean(t.true_cost):.4f}     ${statistics.mean(t.reported_cost):.4f}"
                    if t.true_cost
                    else "-"
                )
                print(f"{case:36} {arm:8} {t.rate(t.accepted, t.runs):14} {cost}")


if __name__ == "__main__":
    main()
