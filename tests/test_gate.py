"""The gate decided in rounds (learning/gate.py) takes exactly the decision the whole split gives."""

from __future__ import annotations

import itertools
import random

from sembp_dsl.learning.gate import Gate, settled
from sembp_dsl.learning.stats import gate_passes

ALPHAS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0)


def recorded_cases(count: int = 200, seed: int = 22) -> list[tuple[float, str, str, int]]:
    """Gate cases drawn with a fixed seed: (alpha, what the current pipeline got on each sample ('R' right,
    'W' wrong), what the proposal got ('R', 'W', or 'L' lost to failed calls), the least round size).
    Each case has its own mix of accuracy, win, loss and loss-to-failure rates; sizes 0 to 80."""
    rng = random.Random(seed)
    cases = []
    for n in range(count):
        size = rng.choice([0, 1, 2, 3, 6, 10, 25, 50, 80]) if n % 4 == 0 else rng.randint(0, 60)
        accuracy, wins, losses, lost = rng.random(), rng.random() * 0.6, rng.random() * 0.6, rng.random() * 0.1
        before = "".join("R" if rng.random() < accuracy else "W" for _ in range(size))
        after = "".join(
            "L"
            if rng.random() < lost
            else ("W" if rng.random() < losses else "R")
            if b == "R"
            else ("R" if rng.random() < wins else "W")
            for b in before
        )
        cases.append((ALPHAS[n % len(ALPHAS)], before, after, rng.choice([1, 1, 2, 5])))
    return cases


def replay(alpha: float, before: str, after: str, least: int, seed: int) -> tuple[Gate, bool, dict]:
    """The gate run round by round on a recorded case: the gate, its decision and its tally when it decided."""
    ids = [f"s{i}" for i in range(len(before))]
    outcome = dict(zip(ids, after))
    gate = Gate(ids, {i for i, b in zip(ids, before) if b == "R"}, alpha, random.Random(seed), least)
    while batch := gate.next_round():
        gate.add(batch, {i for i in batch if outcome[i] == "R"}, {i for i in batch if outcome[i] == "L"})
    decision = gate.decision
    assert decision is not None
    return gate, decision, gate.to_json()


def full_tally(before: str, after: str) -> tuple[int, int]:
    wins = sum(b == "W" and a == "R" for b, a in zip(before, after))
    losses = sum(b == "R" and a == "W" for b, a in zip(before, after))
    return wins, losses


def test_200_recorded_gate_cases_decide_as_the_whole_split_does():
    cases = recorded_cases()
    assert len(cases) == 200 and {alpha for alpha, *_ in cases} == set(ALPHAS)
    used = total = early = 0
    for n, (alpha, before, after, least) in enumerate(cases):
        wins, losses = full_tally(before, after)
        gate, decision, tally = replay(alpha, before, after, least, seed=n)
        assert decision == gate_passes(wins, losses, alpha), (n, alpha, before, after)
        # the record's tally at the decision: outcomes so far, and the samples they took
        assert len(tally["wins"]) <= wins and len(tally["losses"]) <= losses
        assert tally["samples"] == tally["decided_after"] == gate.used <= tally["of"] == len(before)
        assert set(tally["wins"]) | set(tally["losses"]) | set(tally["lost"]) <= {f"s{i}" for i in range(len(before))}
        # evaluating the rest (an accepted step's next baseline) gives the whole split's tally
        rest = gate.rest()
        outcome = dict(zip([f"s{i}" for i in range(len(before))], after))
        gate.add(rest, {i for i in rest if outcome[i] == "R"}, {i for i in rest if outcome[i] == "L"})
        assert (len(gate.wins), len(gate.losses)) == (wins, losses)
        assert len(gate.right) == after.count("R") and gate.to_json()["decided_after"] == tally["decided_after"]
        used, total, early = used + tally["samples"], total + len(before), early + (tally["samples"] < len(before))
    assert early >= 100 and used < 0.8 * total  # it does stop early, and saves calls, on most cases


def test_a_settled_decision_holds_for_every_outcome_of_the_samples_left():
    """Exhaustively on small tallies: whatever the samples left bring (each possible win a win or a tie, each
    possible loss a loss or a tie), a settled decision is the decision."""
    for alpha in ALPHAS:
        for wins, losses, possible_wins, possible_losses in itertools.product(range(7), repeat=4):
            decision = settled(wins, losses, possible_wins, possible_losses, alpha)
            outcomes = {
                gate_passes(wins + a, losses + b, alpha)
                for a in range(possible_wins + 1)
                for b in range(possible_losses + 1)
            }
            if decision is None:
                assert outcomes == {True, False}  # not settled: some outcome left still changes it
            else:
                assert outcomes == {decision}


def test_a_gate_that_cannot_pass_decides_without_a_sample():
    """Two samples at 0.1: even two wins give p = 0.25, so no round is needed."""
    gate = Gate(["a", "b"], set(), 0.1, random.Random(0))
    assert gate.next_round() == [] and gate.decision is False and gate.to_json()["samples"] == 0


def test_a_round_takes_the_fewest_samples_that_could_settle_it():
    """50 samples, the current prompts right on 20, the paper's rule: nothing is settled before 21 samples
    (every one of the 20 right must be seen, and a win), so the first round takes at least that many; at alpha
    0.1 with every one right, no win is possible and nothing is evaluated."""
    ids = [f"s{i}" for i in range(50)]
    gate = Gate(ids, set(ids[:20]), 1.0, random.Random(1))
    assert 21 <= len(gate.next_round()) <= 30  # 30 wrong ones all tying settle a failure
    assert Gate(ids, set(ids), 0.1, random.Random(1)).next_round() == []
    assert len(Gate(ids, set(ids[:20]), 1.0, random.Random(1), least=40).next_round()) == 40
