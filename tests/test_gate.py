"""The gate decided in rounds (learning/gate.py) takes exactly the decision the whole split gives."""

from __future__ import annotations

import itertools
import random
from collections.abc import Collection

from sembp_dsl.learning.gate import Gate, settled
from sembp_dsl.learning.stats import Superiority, gate_passes

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


def unknown_baselines(case: int, size: int) -> set[str]:
    """The samples of a recorded case whose current score the gate is not told, from a seeded mix: none (as every
    case was recorded), all, or a random share."""
    rng = random.Random(f"unknown:{case}")
    share = (0.0, 1.0, rng.random(), rng.random())[case % 4]
    return {f"s{i}" for i in range(size) if rng.random() < share}


def replay(
    alpha: float, before: str, after: str, least: int, seed: int, unknown: Collection[str] = ()
) -> tuple[Gate, bool, dict]:
    """The gate run round by round on a recorded case, the current scores of `unknown` samples held back until it
    asks for them, each round's outcomes arriving one at a time in a seeded order (either side's), the rest of a
    round cancelled once the decision is settled: the gate, its decision and its tally when it decided."""
    ids = [f"s{i}" for i in range(len(before))]
    outcome, baseline = dict(zip(ids, after)), dict(zip(ids, before))
    right = {i for i in ids if baseline[i] == "R"}
    gate = Gate(ids, right - set(unknown), alpha, random.Random(seed), least, known=set(ids) - set(unknown))
    arrival = random.Random(f"arrival:{seed}")
    asked: list[str] = []
    cancelled: list[str] = []
    while batch := gate.next_round():
        assert set(batch.current) <= set(unknown) - set(asked) and set(batch.current) <= set(gate.evaluated)
        asked += batch.current
        reports = [(False, i) for i in batch.proposal] + [(True, i) for i in batch.current]
        arrival.shuffle(reports)
        for n, (current, i) in enumerate(reports):
            if current:
                gate.add_current([i], {i} if baseline[i] == "R" else set(), set())
            else:
                gate.add([i], {i} if outcome[i] == "R" else set(), {i} if outcome[i] == "L" else set())
            if gate.decision is not None:
                left = gate.cancel()
                assert sorted(left) == sorted(i for _, i in reports[n + 1 :])
                cancelled += left
                break
    decision = gate.decision
    assert decision is not None and gate.current == len(set(asked) - set(cancelled))
    tally = gate.to_json()
    # a cancelled sample is unknown: neither a win, a loss nor a tie (lost), nor evaluated
    counted = {*tally["wins"], *tally["losses"], *tally["lost"], *tally["evaluated"]}
    assert not counted & set(cancelled) - set(tally["evaluated"]) and sorted(cancelled) == tally.get("cancelled", [])
    return gate, decision, tally


def full_tally(before: str, after: str) -> tuple[int, int]:
    wins = sum(b == "W" and a == "R" for b, a in zip(before, after))
    losses = sum(b == "R" and a == "W" for b, a in zip(before, after))
    return wins, losses


def test_200_recorded_gate_cases_decide_as_the_whole_split_does():
    """Every case twice: with every current score known, and with some held back (the run knows only part of its
    current prompts' results): the decision is the whole split's either way."""
    cases = recorded_cases()
    assert len(cases) == 200 and {alpha for alpha, *_ in cases} == set(ALPHAS)
    used = total = early = asked = held = 0
    for n, (alpha, before, after, least) in enumerate(cases):
        wins, losses = full_tally(before, after)
        for unknown in (set(), unknown_baselines(n, len(before))):
            gate, decision, tally = replay(alpha, before, after, least, n, unknown)
            assert decision == gate_passes(wins, losses, alpha), (n, alpha, before, after, sorted(unknown))
            # the record's tally at the decision: outcomes so far, and the samples they took
            assert len(tally["wins"]) <= wins and len(tally["losses"]) <= losses
            assert tally["samples"] == tally["decided_after"] == gate.used == len(tally["evaluated"]) <= tally["of"]
            assert tally["of"] == len(before) and tally["current"] <= len(unknown)
            ids = {f"s{i}" for i in range(len(before))}
            assert set(tally["wins"]) | set(tally["losses"]) | set(tally["lost"]) <= set(tally["evaluated"]) <= ids
            asked, held = asked + tally["current"], held + len(unknown & set(tally["evaluated"]))
            used, total, early = used + tally["samples"], total + len(before), early + (tally["samples"] < len(before))
    assert early >= 200 and used < 0.8 * total  # it does stop early, and saves calls, on most cases
    assert 0 < asked < held  # of the unknown current scores it met, it asked for some, not all


def test_an_unknown_current_score_is_asked_for_only_when_it_can_change_the_decision():
    """Paper's rule; d's current score unknown. 3 wins and the proposal wrong on d: at worst a loss, which
    cannot undo 3 wins, so d is never asked for. A win, a loss and the proposal right on d: a win there passes,
    a tie fails, so it must be."""
    ids = ["a", "b", "c", "d"]
    gate = Gate(ids, set(), 1.0, random.Random(0), least=4, known={"a", "b", "c"})
    batch = gate.next_round()
    assert sorted(batch.proposal) == ids and batch.current == []
    gate.add(ids, {"a", "b", "c"}, set())
    assert gate.decision is True and not gate.next_round() and gate.current == 0
    gate = Gate(["a", "b", "d"], {"b"}, 1.0, random.Random(0), least=3, known={"a", "b"})
    gate.add(gate.next_round().proposal, {"a", "d"}, set())
    assert (gate.wins, gate.losses, gate.decision) == (["a"], ["b"], None)
    batch = gate.next_round()
    assert (batch.proposal, batch.current) == ([], ["d"])
    gate.add_current(["d"], set(), set())  # the current prompts get d wrong: a win
    assert gate.decision is True and gate.wins == ["a", "d"] and gate.to_json()["current"] == 1


def test_the_proposals_score_narrows_an_unknown_sample():
    gate = Gate(["x", "y", "z"], set(), 1.0, random.Random(0), least=3, known=set())
    assert gate.possible == (3, 3)
    gate.add(gate.next_round().proposal, {"x"}, {"z"}, {})
    assert gate.open == {"x": 1.0, "y": 0.0} and gate.lost == ["z"]  # z lost: a tie, whatever its current score
    assert (gate.could_win("x"), gate.could_lose("x"), gate.could_win("y"), gate.could_lose("y")) == (
        True,
        False,
        False,
        True,
    )


def test_a_settled_decision_holds_for_every_outcome_of_the_samples_left():
    """Exhaustively on small tallies: whatever the samples left bring (each possible win a win or a tie, each
    possible loss a loss or a tie), a settled decision is the decision."""
    for alpha in ALPHAS:
        for wins, losses, possible_wins, possible_losses in itertools.product(range(7), repeat=4):
            decision = settled(wins, losses, possible_wins, possible_losses, Superiority(alpha))
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
    assert not gate.next_round() and gate.decision is False and gate.to_json()["samples"] == 0


def test_a_round_takes_the_fewest_samples_that_could_settle_it():
    """50 samples, the current prompts right on 20, the paper's rule: nothing is settled before 21 samples
    (every one of the 20 right must be seen, and a win), so the first round takes at least that many; at alpha
    0.1 with every one right, no win is possible and nothing is evaluated."""
    ids = [f"s{i}" for i in range(50)]
    gate = Gate(ids, set(ids[:20]), 1.0, random.Random(1))
    assert 21 <= len(gate.next_round().proposal) <= 30  # 30 wrong ones all tying settle a failure
    assert not Gate(ids, set(ids), 0.1, random.Random(1)).next_round()
    assert len(Gate(ids, set(ids[:20]), 1.0, random.Random(1), least=40).next_round().proposal) == 40


def paid_and_rounds(before: str, after: str, seed: int) -> tuple[int, int]:
    """A case replayed as a run pays for it: every sample of a round it started (the calls went out at once),
    and the rounds it took (each a model round trip or two on the critical path)."""
    gate, _, _ = replay(1.0, before, after, 2, seed)
    return gate.used + len(gate.cancelled), gate.rounds


def test_a_round_takes_what_the_outcomes_so_far_say_the_decision_will_need():
    """Rounds sized by the outcomes so far: a gate whose proposal wins and loses at one rate stays open to the end,
    so it takes the rest at once rather than a handful a round; a lopsided one still settles in a few samples.
    Rounds of the fewest samples that could settle it took 5.6 rounds and 43.4 samples on the coin flips, 4.8 and
    30.4 on the lopsided ones; every sample at once takes 1 round and 50."""
    rng = random.Random(31)
    coin_flips, lopsided = [], []
    for seed in range(300):
        before = "".join("R" if rng.random() < 0.6 else "W" for _ in range(50))
        after = "".join("R" if rng.random() < 0.6 else "W" for _ in range(50))
        coin_flips.append(paid_and_rounds(before, after, seed))
        difficulty = [rng.random() for _ in range(50)]
        current, proposed = 0.3 + 0.4 * rng.random(), 0.3 + 0.4 * rng.random()
        before = "".join("R" if d + 0.3 * (rng.random() - 0.5) < current else "W" for d in difficulty)
        after = "".join("R" if d + 0.3 * (rng.random() - 0.5) < proposed else "W" for d in difficulty)
        lopsided.append(paid_and_rounds(before, after, seed))
    mean = lambda pairs, k: sum(pair[k] for pair in pairs) / len(pairs)  # noqa: E731
    assert mean(coin_flips, 1) < 3.3 and mean(coin_flips, 0) < 46.5
    assert mean(lopsided, 1) < 3.0 and mean(lopsided, 0) < 33


def whole_split(before: dict[str, float], after: dict[str, float | None], alpha: float) -> bool:
    """The rule on the whole split, lost samples (None) tying: wins beat losses (sign test) and the mean rises."""
    scored = [(before[i], a) for i, a in after.items() if a is not None]
    wins, losses = sum(a > b for b, a in scored), sum(a < b for b, a in scored)
    return gate_passes(wins, losses, alpha, sum(a - b for b, a in scored))


def test_partial_credit_never_lowers_the_mean_through_the_gate():
    """{0.4, 0.4, 1} -> {0.6, 0.6, 0}: two wins and a loss, but the mean falls from 0.6 to 0.4; at alpha 1 and
    0.5 (where 2 wins, 1 loss give p = 0.5) it does not pass. Raised to {0.6, 0.6, 0.9} it does."""
    for alpha in (1.0, 0.5):
        for last, passes in ((0.0, False), (0.9, True)):
            gate = Gate(["a", "b", "c"], {"c"}, alpha, random.Random(0), least=3, partial={"a": 0.4, "b": 0.4})
            gate.add(gate.next_round().proposal, set(), set(), {"a": 0.6, "b": 0.6, **({"c": last} if last else {})})
            assert (len(gate.wins), len(gate.losses), gate.decision) == (2, 1, passes), (alpha, last)


def test_partial_credit_cases_decide_as_the_whole_split_does():
    """Random splits with scores in tenths, some current scores held back, some samples lost, outcomes arriving one
    at a time: the gate, settling early and cancelling the rest of its round, decides as the whole split does
    (mean and sign test together)."""
    rng = random.Random(34)
    early = 0
    for n in range(300):
        size, alpha = rng.randint(0, 14), ALPHAS[n % len(ALPHAS)]
        ids = [f"s{i}" for i in range(size)]
        before = {i: rng.choice((0.0, 1.0, rng.randint(0, 10) / 10)) for i in ids}
        after: dict[str, float | None] = {
            i: None if rng.random() < 0.1 else min(1.0, max(0.0, before[i] + rng.choice((-1, 0, 1)) * rng.random()))
            for i in ids
        }
        unknown = {i for i in ids if rng.random() < 0.3}
        known = {i: s for i, s in before.items() if i not in unknown}
        gate = Gate(
            ids,
            {i for i, s in known.items() if s >= 1.0},
            alpha,
            random.Random(n),
            rng.choice((1, 2, 5)),
            partial={i: s for i, s in known.items() if 0 < s < 1},
            known=set(known),
        )
        while batch := gate.next_round():  # outcomes one at a time, either side's, the rest cancelled once settled
            reports = [(False, i) for i in batch.proposal] + [(True, i) for i in batch.current]
            rng.shuffle(reports)
            for current, i in reports:
                if gate.decision is not None:
                    assert set(gate.cancel()) >= {i}
                    break
                if current:
                    score = before[i]
                    gate.add_current([i], {i} if score == 1.0 else set(), set(), {i: score} if 0 < score < 1 else {})
                else:
                    s = after[i]
                    gate.add(
                        [i], {i} if s == 1.0 else set(), {i} if s is None else set(), {i: s} if s and s < 1 else {}
                    )
        assert gate.decision == whole_split(before, after, alpha), (n, before, after, unknown)
        early += gate.used < size
    assert early > 50


def test_a_sample_the_current_prompts_lost_when_asked_again_ties():
    """The current prompts' score on d is unknown (lost before); asked again, it is lost again: a tie, not a win."""
    gate = Gate(["a", "d"], set(), 1.0, random.Random(0), least=2, known={"a"})
    gate.add(gate.next_round().proposal, {"d"}, set())
    batch = gate.next_round()
    assert batch.current == ["d"]
    gate.add_current(["d"], set(), {"d"})
    assert gate.wins == [] and gate.decision is False and "d" in gate.lost
