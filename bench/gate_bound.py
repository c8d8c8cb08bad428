"""How few samples any gate can take the whole split's decision on, when right and wrong answers are coin flips,
and how near sbpc's gate comes: the floor under the calls per run on bench/paper_calls.py's "redrawn" model.

The setting is that bench's (the paper's LIAR run): a gate on the 50 training samples at alpha 1, the current
prompts' outcome known on every sample (the initial score), the proposal right on each with chance `--accuracy`,
drawn afresh, as the current prompts were. A gate must give the decision the whole split gives. Its least expected
number of samples, over every order it could take them in, chosen adaptively one at a time, is an exact dynamic
program over (wins, losses, samples left that can only win, samples left that can only lose), averaged over how
many samples the current prompts get wrong. sbpc's gate (learning/gate.py, rounds as shipped, outcomes arriving
one at a time in random order, a round's samples all paid for) is simulated on the same draws.

Each iteration of either loop asks 8 questions (2 backward, 6 optimizer); a sample is 6 calls (5 analysts, the
judge); the authors' loop scores the whole batch three times, so their run is 300 + 2 x 308 = 916 calls. sbpc
scores it once at first, then each gate takes what its decision needs: 300 + 2 x (8 + 6 x samples) at least.

    python bench/gate_bound.py [--accuracy 0.6] [--samples 50] [--trials 2000]
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from functools import cache
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sembp_dsl.learning.gate import Gate, settled  # noqa: E402
from sembp_dsl.learning.optimize import BATCH  # noqa: E402
from sembp_dsl.learning.stats import Superiority  # noqa: E402

RULE = Superiority(1.0)  # the paper's gate: any net gain
QUESTIONS, CALLS_PER_SAMPLE, ITERATIONS = 8, 6, 2


def least_samples(can_win: int, can_lose: int, accuracy: float) -> float:
    """The least expected samples to settle the decision, over every adaptive order (one sample at a time)."""

    @cache
    def expected(wins: int, losses: int, win_left: int, lose_left: int) -> float:
        if settled(wins, losses, win_left, lose_left, RULE) is not None:
            return 0.0
        options = []
        if win_left:  # the current prompts got it wrong: the proposal wins it when right
            options.append(
                accuracy * expected(wins + 1, losses, win_left - 1, lose_left)
                + (1 - accuracy) * expected(wins, losses, win_left - 1, lose_left)
            )
        if lose_left:  # the current prompts got it right: the proposal loses it when wrong
            options.append(
                (1 - accuracy) * expected(wins, losses + 1, win_left, lose_left - 1)
                + accuracy * expected(wins, losses, win_left, lose_left - 1)
            )
        return 1 + min(options)

    return expected(0, 0, can_win, can_lose)


def shipped(samples: int, accuracy: float, rng: random.Random) -> tuple[int, int]:
    """sbpc's gate on one draw: samples paid for (every sample of a round it started) and rounds."""
    ids = [str(i) for i in range(samples)]
    current = {i for i in ids if rng.random() < accuracy}
    proposal = {i for i in ids if rng.random() < accuracy}
    gate = Gate(ids, current, RULE.alpha, random.Random(rng.random()), least=BATCH // CALLS_PER_SAMPLE)
    paid = 0
    while batch := gate.next_round():
        paid += len(batch.proposal)
        for sample in rng.sample(batch.proposal, len(batch.proposal)):
            if gate.decision is not None:
                gate.cancel()
                break
            gate.add([sample], {sample} & proposal, set())
    return paid, gate.rounds


def calls(samples_per_gate: float, split: int) -> float:
    return split * CALLS_PER_SAMPLE + ITERATIONS * (QUESTIONS + CALLS_PER_SAMPLE * samples_per_gate)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--accuracy", type=float, default=0.6, help="chance of a right answer, either prompts")
    ap.add_argument("--samples", type=int, default=50, help="gate samples (the training batch)")
    ap.add_argument("--trials", type=int, default=2000, help="draws of sbpc's simulated gate")
    args = ap.parse_args()
    n, p = args.samples, args.accuracy
    weights = {wrong: math.comb(n, wrong) * (1 - p) ** wrong * p ** (n - wrong) for wrong in range(n + 1)}
    likely = {wrong: w for wrong, w in weights.items() if w > 1e-5}
    floor = sum(w * least_samples(wrong, n - wrong, p) for wrong, w in likely.items()) / sum(likely.values())
    rng = random.Random(0)
    runs = [shipped(n, p, rng) for _ in range(args.trials)]
    ours, rounds = statistics.mean(r[0] for r in runs), statistics.mean(r[1] for r in runs)
    authors = n * CALLS_PER_SAMPLE + ITERATIONS * (QUESTIONS + CALLS_PER_SAMPLE * n)
    print(
        f"a gate on {n} samples at alpha 1, every answer right with chance {p:g} (current prompts and proposal alike)"
    )
    print(f"  least expected samples, any order chosen one at a time: {floor:5.1f} of {n}")
    print(f"  sbpc's gate, {args.trials} draws:                       {ours:5.1f} of {n}, in {rounds:.2f} rounds")
    print(f"calls per run, {ITERATIONS} iterations, against the authors' {authors}:")
    print(f"  at the least:   {calls(floor, n):6.1f}  {calls(floor, n) / authors:.3f}x")
    print(f"  sbpc's gate:    {calls(ours, n):6.1f}  {calls(ours, n) / authors:.3f}x")


if __name__ == "__main__":
    main()
