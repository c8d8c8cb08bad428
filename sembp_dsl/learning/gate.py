"""The gate, decided in rounds: evaluate the proposal on the gate split only until its decision is settled.

Samples are compared by score: a win scores higher than the current pipeline did, a loss lower, a tie the same
(a sample lost to failed calls, or that its metric could not score, ties; on the current pipeline's side such a
sample is unknown, asked again where it matters, and ties if lost again). With partial credit the rule also asks
the sum of the score changes to be above 0 (few small wins must not outvote a large loss); each sample left has a
lowest and a highest change it can still bring, and the rule passes more as any change grows, so the two sums
settle it as the two counts do. A sample the current pipeline gets
right (score 1) can only tie or be a loss; one it gets wrong (score 0) can only tie or be a win; one it got
partial credit on (a judge's 0.6) can be either. The rule (`gate_passes`) passes more with every win and fewer with
every loss, so when it gives the same answer with every sample left going the proposal's way and with every
one going against it, that answer is the one the whole split would give, whatever the samples left hold.

The current pipeline's score may be unknown on some samples (the run evaluates nothing only to know it). Such a
sample can be a win, a loss or a tie; the proposal is evaluated on it first, and its score narrows that (right:
a win or a tie; wrong: a loss or a tie; partial credit: either). The current pipeline is evaluated on it only
while its outcome can still change the decision, and until then it counts as every outcome it may still have.

Each round takes as many samples as the outcomes so far say it will need (`_expected`), and never fewer than
could settle it (at least `least`): a round is a model round trip or two, so a decision that stays open to the
end (a proposal that wins and loses at one rate) takes two or three rounds, not one per handful of samples. It
takes them first from the group likelier to settle it: before any outcome, the group whose way could settle it
sooner (the right ones for a pass, the wrong ones for a failure); then the group likelier to move it the way the
outcomes so far point; samples that can still go either way (of unknown or partial score) between the two. The
decision never depends on the order, only the number of samples evaluated does.
A round takes only samples whose outcome can still change the decision, for some outcome of the others (all of
them when that leaves none: the count alone does not see a sum of score changes).

Outcomes are added as they arrive, so a round can be settled before its end: the samples still in flight are then
cancelled (`cancel`). Such a sample is unknown, neither a loss nor a tie; an outcome added once the decision is
settled is not counted (it could not change it), and is kept with the cancelled ones.

A step that makes the pipeline cheaper is held to non-inferiority instead (`margin`, stats.NonInferiority): wins
and losses both count, a sample lost on either side is no evidence (left out of the samples the test counts; one
the step's own model lost is charged to the margin), and ties count for it. The number of samples the test counts
is then known only at the end, and its exact critical value changes with it, so that gate takes the whole split
in one round: it has no early look to account for.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from .stats import NO_GAIN, NonInferiority, Superiority

Rule = Superiority | NonInferiority  # what a step must show: better, or not worse by more than a margin


def settled(
    wins: int,
    losses: int,
    possible_wins: int,
    possible_losses: int,
    rule: Superiority,
    gains: tuple[float, float] | None = None,
) -> bool | None:
    """The gate's decision once no outcome of the samples left can change it, else None. `gains`: the lowest and
    the highest sum of score changes the whole split can still reach (None: scores of 0 or 1)."""
    low, high = gains if gains is not None else (None, None)
    best = rule.passes(wins + possible_wins, losses, high)
    worst = rule.passes(wins, losses + possible_losses, low)
    return best if best == worst else None


@dataclass(frozen=True)
class Round:
    """What a round evaluates: the proposal on samples not seen yet, the current pipeline on samples whose outcome
    hangs on its unknown score."""

    proposal: list[str]
    current: list[str]

    def __bool__(self) -> bool:
        return bool(self.proposal or self.current)


class Gate:
    """The proposal against the current pipeline on one split: which samples to evaluate next, the tally so far."""

    def __init__(
        self,
        ids: Sequence[str],
        baseline: Collection[str],
        alpha: float,
        rng: random.Random,
        least: int = 1,
        partial: Mapping[str, float] = MappingProxyType({}),
        known: Collection[str] | None = None,
        margin: float | None = None,
    ):
        """`baseline`: the samples the current pipeline gets right; `partial`: its scores between 0 and 1 (every
        other sample scored 0); `known`: the samples its score is known on (None: all of them); `margin`: the step
        need only not be worse by this much (a non-inferiority test), else it must be better."""
        self.size, self.alpha, self.least, self.margin = len(ids), alpha, max(1, least), margin
        self.sign = Superiority(alpha)  # the rule of a step that must do better, which the early looks settle
        self.rule: Rule = self.sign if margin is None else NonInferiority(alpha, margin, len(ids))
        self.up = self.down = 0.0  # the sums of the score rises and falls on the samples tallied
        self.answered = 0  # samples tallied: scored on both sides
        self.own_lost: list[str] = []  # lost on the proposal's side (its own calls, or its metric)
        self.baseline = set(baseline)
        self.before: dict[str, float | None] = {
            i: (1.0 if i in self.baseline else partial.get(i, 0.0)) if known is None or i in known else None
            for i in ids
        }
        self.unseen = rng.sample(list(ids), len(ids))  # in drawn order
        self.open: dict[str, float] = {}  # the proposal's score where the current pipeline's is still unknown
        self.wins: list[str] = []
        self.losses: list[str] = []
        self.right: list[str] = []
        self.partial: dict[str, float] = {}  # the proposal's scores between 0 and 1
        self.gain = 0.0  # the sum of the score changes on the samples tallied
        self.lost: list[str] = []  # lost on either side (failed calls, a metric that could not score): ties
        self.evaluated: list[str] = []  # samples the proposal was evaluated on
        self.current = 0  # evaluations of the current pipeline the decision needed
        self.seen = {True: 0, False: 0}  # samples evaluated that could be a loss (True), that could be a win
        self.rounds = 0
        self.decided_after: int | None = None  # samples evaluated when the decision was settled
        self.flying: list[str] = []  # the proposal's samples of this round, not reported yet: pending
        self.asking: list[str] = []  # open samples the current pipeline is evaluated on this round
        self.cancelled: list[str] = []  # started, then left out once the decision was settled: unknown
        self._decided: bool | None = None  # a settled decision stays settled: no outcome left can change it

    @property
    def used(self) -> int:
        """Samples the proposal was evaluated on or is in flight on (those cancelled are not)."""
        return len(self.evaluated) + len(self.flying)

    def could_win(self, sample: str) -> bool:
        before, after = self.before[sample], self.open.get(sample)
        if before is None:  # unknown: any score below the proposal's (when that is known)
            return after is None or after > 0.0
        return before < 1.0

    def could_lose(self, sample: str) -> bool:
        before, after = self.before[sample], self.open.get(sample)
        if before is None:
            return after is None or after < 1.0
        return before > 0.0

    @property
    def pending(self) -> list[str]:
        """The samples whose outcome is still open: not seen yet, or seen where the current score is unknown."""
        return [*self.open, *self.flying, *self.unseen]

    @property
    def possible(self) -> tuple[int, int]:
        """(wins, losses) the samples left could still add."""
        pending = self.pending
        return sum(map(self.could_win, pending)), sum(map(self.could_lose, pending))

    def change(self, sample: str) -> tuple[float, float]:
        """The lowest and the highest score change a pending sample can still bring."""
        before, after = self.before[sample], self.open.get(sample)
        if before is not None:
            return -before, 1.0 - before
        return (-1.0, 1.0) if after is None else (after - 1.0, after)

    @property
    def gains(self) -> tuple[float, float]:
        """The lowest and the highest sum of score changes the whole split can still reach: each sample left at
        its worst, or at its best. The rule passes more as any sample's change grows (a larger change is a win
        rather than a tie, a tie rather than a loss, and a larger sum), so these two ends settle it."""
        changes = [self.change(sample) for sample in self.pending]
        return self.gain + sum(low for low, _ in changes), self.gain + sum(high for _, high in changes)

    @property
    def decision(self) -> bool | None:
        if self._decided is None and isinstance(self.rule, NonInferiority):
            if not self.pending and not self.asking:
                self._decided = self.rule.passes(self.up, self.down, self.answered, len(self.own_lost))
                self.decided_after = len(self.evaluated)
        elif self._decided is None:
            self._decided = settled(len(self.wins), len(self.losses), *self.possible, self.sign, self.gains)
            if self._decided is not None:
                self.decided_after = len(self.evaluated)
        return self._decided

    @property
    def p(self) -> float:
        if isinstance(self.rule, NonInferiority):
            return self.rule.p(self.up, self.down, self.answered, len(self.own_lost))
        return self.rule.p(len(self.wins), len(self.losses))

    def matters(self, win: bool, lose: bool) -> bool:
        """Whether a pending sample that could be a win (`win`), a loss (`lose`) or a tie can still change the decision,
        for some outcome of the others: its being a win rather than a tie, or a loss rather than a tie, flips the
        rule somewhere in between (the rule is monotone, so the ends of each range tell)."""
        wins, losses = len(self.wins), len(self.losses)
        possible_wins, possible_losses = self.possible
        others_wins, others_losses = possible_wins - win, possible_losses - lose
        passes = lambda more_wins, more_losses: self.sign.passes(wins + more_wins, losses + more_losses)  # noqa: E731
        return (
            lose and any(passes(extra, 0) != passes(extra, others_losses + 1) for extra in range(others_wins + 1))
        ) or (win and any(passes(others_wins + 1, extra) != passes(0, extra) for extra in range(others_losses + 1)))

    def next_round(self) -> Round:
        """The samples to evaluate next (the last round's all reported or cancelled): none once the decision is
        settled."""
        if self.decision is not None:
            return Round([], [])
        if isinstance(self.rule, NonInferiority):  # the whole split, at once
            taken = [i for i in self.open if i not in self.asking] + self.unseen
        else:
            order = self._order() or self._grouped(True, everything=True)
            taken = order[: max(min(self._fewest(order), len(order)), self._expected(order), self.least)]
        chosen = set(taken)
        self.unseen = [i for i in self.unseen if i not in chosen]
        self.rounds += 1
        self.asking = [i for i in taken if i in self.open]
        self.flying = [i for i in taken if i not in self.open]
        self.current += len(self.asking)
        return Round(list(self.flying), list(self.asking))

    def cancel(self) -> list[str]:
        """The decision is settled: the samples still in flight are left out, unknown (not lost, not a tie); the
        current pipeline's evaluations still in flight were not needed after all. Returns those samples."""
        left = [*self.flying, *self.asking]
        self.cancelled += left
        self.current -= len(self.asking)
        self.flying, self.asking = [], []
        return left

    def _fewest(self, order: Sequence[str], way: bool | None = None) -> int:
        """How many samples from the start of `order` could settle the decision (that way, or either), at the
        fewest."""
        wins, losses = len(self.wins), len(self.losses)
        possible_wins, possible_losses = self.possible
        could_win = could_lose = 0
        for n, sample in enumerate(order, start=1):
            could_lose += self.could_lose(sample)
            could_win += self.could_win(sample)
            # all of them going its way passes it for good, or all going against it fails it for good
            passes = self.sign.passes(wins + could_win, losses + possible_losses - could_lose)
            fails = not self.sign.passes(wins + possible_wins - could_win, losses + could_lose)
            if (passes and way is not False) or (fails and way is not True):
                return n
        return len(order) + 1

    def _expected(self, order: Sequence[str]) -> int:
        """How many samples from the start of `order` the decision will need, were each to go as the outcomes so
        far go (`_rates`): all of them while those outcomes leave it open. Before any outcome, 0: the first round
        takes the fewest that could settle it, as nothing yet says how it goes."""
        if not self.evaluated:
            return 0
        win_rate, loss_rate = self._rates()
        possible_wins, possible_losses = self.possible
        wins, losses, could_win, could_lose = 0.0, 0.0, 0, 0
        for n, sample in enumerate(order, start=1):
            could_win += self.could_win(sample)
            could_lose += self.could_lose(sample)
            wins += win_rate * self.could_win(sample)
            losses += loss_rate * self.could_lose(sample)
            tally = len(self.wins) + round(wins), len(self.losses) + round(losses)
            if settled(*tally, possible_wins - could_win, possible_losses - could_lose, self.sign) is not None:
                return n
        return len(order)

    def _rates(self) -> tuple[float, float]:
        """How often a sample that could be a win was one, and one that could be a loss was one (one prior each)."""
        return (len(self.wins) + 1) / (self.seen[False] + 2), (len(self.losses) + 1) / (self.seen[True] + 2)

    def add(
        self,
        ids: Sequence[str],
        right: Collection[str],
        lost: Collection[str],
        partial: Mapping[str, float] = MappingProxyType({}),
    ) -> None:
        """The proposal's outcome on evaluated samples: which it got right, its scores between 0 and 1 (every other
        sample scored 0), which were lost (to failed calls, or a metric that could not score them)."""
        for sample in ids:
            settled_without = self.decision is not None  # asked while the sample is pending
            if sample in self.flying:
                self.flying.remove(sample)
            if settled_without:  # too late to count: the decision is settled without it
                self.cancelled.append(sample)
                continue
            self.evaluated.append(sample)
            self.seen[True] += self.could_lose(sample)
            self.seen[False] += self.could_win(sample)
            if sample in lost:
                self.lost.append(sample)
                self.own_lost.append(sample)
                continue
            after = 1.0 if sample in right else partial.get(sample, 0.0)
            if after >= 1.0:
                self.right.append(sample)
            elif after > 0.0:
                self.partial[sample] = after
            if self.before[sample] is None:
                self.open[sample] = after
            else:
                self._tally(sample, after)

    def add_current(
        self,
        ids: Sequence[str],
        right: Collection[str],
        lost: Collection[str],
        partial: Mapping[str, float] = MappingProxyType({}),
    ) -> None:
        """The current pipeline's outcome on open samples (one lost again, to failed calls or its metric, ties)."""
        for sample in ids:
            settled_without = self.decision is not None
            if sample in self.asking:
                self.asking.remove(sample)
            if settled_without:  # too late to count, and not needed
                self.cancelled.append(sample)
                self.current -= 1
                continue
            if sample in lost:
                self.open.pop(sample)
                self.lost.append(sample)
                continue
            before = 1.0 if sample in right else partial.get(sample, 0.0)
            self.before[sample] = before
            if before >= 1.0:
                self.baseline.add(sample)
            self._tally(sample, self.open.pop(sample))

    def _noninferiority(self) -> dict:
        """What a non-inferiority decision rests on: the samples it counted, the statistic against its exact critical
        value, the margin left once the step's own lost samples are charged to it."""
        assert isinstance(self.rule, NonInferiority)
        own = len(self.own_lost)
        return {
            "test": "non-inferiority score test (restricted MLE), exact size",
            "answered": self.answered,
            "own_lost": sorted(self.own_lost),
            "margin_left": self.rule.effective_margin(own),
            "z": _finite(self.rule.z(self.up, self.down, self.answered, own)),
            "critical": _finite(self.rule.critical(self.answered, own)),
        }

    def _tally(self, sample: str, after: float) -> None:
        before = self.before[sample]
        assert before is not None
        self.gain += after - before
        self.up += max(after - before, 0.0)
        self.down += max(before - after, 0.0)
        self.answered += 1
        if after > before:
            self.wins.append(sample)
        elif after < before:
            self.losses.append(sample)

    def _order(self) -> list[str]:
        """The samples left, those whose outcome can still change the decision, the likelier movers first. Before
        any outcome: the current pipeline's right ones when all of them tying could pass it sooner than all its
        wrong ones tying could fail it, else those. Then by the outcomes so far (rates with one prior each): toward
        a pass, a tie on a sample the current pipeline gets right or a win; toward a failure, a loss or a tie on
        one it gets wrong."""
        if not self.used:
            right_first = self._fewest(self._grouped(True), way=True) < self._fewest(self._grouped(False), way=False)
            return self._grouped(right_first)
        win_rate, loss_rate = self._rates()
        possible_wins, possible_losses = self.possible
        expected = (
            round(len(self.wins) + win_rate * possible_wins),
            round(len(self.losses) + loss_rate * possible_losses),
        )
        if self.sign.passes(*expected):
            right_first = 1 - loss_rate >= win_rate
        else:
            right_first = loss_rate >= 1 - win_rate
        return self._grouped(right_first)

    def _grouped(self, right_first: bool, everything: bool = False) -> list[str]:
        """The samples left that can still change the decision (`everything`: all of them), grouped by what they
        can still be: only a loss or a tie (the current pipeline gets them right, or the proposal wrong where that
        is unknown) first (or last), either, then only a win or a tie (or first). Within a group, open samples
        first (the proposal's half is paid for), then the others in drawn order."""

        def group(sample: str) -> tuple[int, bool]:
            win, lose = self.could_win(sample), self.could_lose(sample)
            return (1 if win == lose else 0 if lose == right_first else 2), sample not in self.open

        left = [i for i in self.open if i not in self.asking] + self.unseen
        kinds = {(self.could_win(i), self.could_lose(i)) for i in left}
        mattering = {kind for kind in kinds if everything or self.matters(*kind)}  # the same for every sample of a kind
        return sorted([i for i in left if (self.could_win(i), self.could_lose(i)) in mattering], key=group)

    def to_json(self) -> dict:
        """The tally as the run record keeps it: outcomes so far, and how many samples the decision took."""
        return {
            "wins": sorted(self.wins),
            "losses": sorted(self.losses),
            "p": self.p,
            "alpha": self.alpha,
            **({"margin": self.margin, **self._noninferiority()} if self.margin is not None else {}),
            "lost": sorted(self.lost),
            "right": sorted(self.right),
            **({"partial": dict(sorted(self.partial.items()))} if self.partial else {}),
            # with partial credit, the sum of the score changes (with 0 or 1, wins - losses: not kept)
            **({"gain": round(self.gain, 9)} if abs(self.gain - len(self.wins) + len(self.losses)) > NO_GAIN else {}),
            "samples": self.used,
            "decided_after": self.used if self.decided_after is None else self.decided_after,
            "of": self.size,
            "rounds": self.rounds,
            "evaluated": sorted(self.evaluated),
            "current": self.current,
            **({"cancelled": sorted(self.cancelled)} if self.cancelled else {}),
        }


def _finite(x: float) -> float | None:
    """A statistic as JSON holds it: None for an infinite one (no outcome passes, or none counted)."""
    return x if abs(x) != float("inf") else None
