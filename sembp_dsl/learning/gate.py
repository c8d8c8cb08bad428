"""The gate, decided in rounds: evaluate the proposal on the gate split only until its decision is settled.

A sample the current pipeline gets right can only tie or be a loss; one it gets wrong can only tie or be a
win (a sample lost to failed calls ties). The rule (`gate_passes`) passes more with every win and fewer with
every loss, so when it gives the same answer with every sample left going the proposal's way and with every
one going against it, that answer is the one the whole split would give, whatever the samples left hold.
Each round takes the fewest samples that could settle it (at least `least`), first from the group likelier
to settle it: before any outcome, the group whose way could settle it sooner (the right ones for a pass, the wrong
ones for a failure); then the group likelier to move
it the way the outcomes so far point. The decision never depends on the order, only the number of samples
evaluated does.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence

from .stats import gate_passes, sign_test


def settled(wins: int, losses: int, possible_wins: int, possible_losses: int, alpha: float) -> bool | None:
    """The gate's decision once no outcome of the samples left can change it, else None."""
    best = gate_passes(wins + possible_wins, losses, alpha)
    worst = gate_passes(wins, losses + possible_losses, alpha)
    return best if best == worst else None


class Gate:
    """The proposal against the current pipeline on one split: which samples to evaluate next, the tally so far."""

    def __init__(self, ids: Sequence[str], baseline: Collection[str], alpha: float, rng: random.Random, least: int = 1):
        self.size, self.alpha, self.least = len(ids), alpha, max(1, least)
        self.baseline = set(baseline)
        self.unseen = rng.sample(list(ids), len(ids))  # in drawn order
        self.wins: list[str] = []
        self.losses: list[str] = []
        self.right: list[str] = []
        self.lost: list[str] = []
        self.seen = {True: 0, False: 0}  # samples evaluated, by whether the current pipeline got them right
        self.rounds = 0
        self.decided_after: int | None = None  # samples evaluated when the decision was found settled

    @property
    def used(self) -> int:
        return self.size - len(self.unseen)

    @property
    def possible(self) -> tuple[int, int]:
        """(wins, losses) the samples left could still add."""
        right = sum(i in self.baseline for i in self.unseen)
        return len(self.unseen) - right, right

    @property
    def decision(self) -> bool | None:
        return settled(len(self.wins), len(self.losses), *self.possible, self.alpha)

    @property
    def p(self) -> float:
        return sign_test(len(self.wins), len(self.losses))

    def next_round(self) -> list[str]:
        """The ids to evaluate next: none once the decision is settled."""
        if self.decision is not None:
            if self.decided_after is None:
                self.decided_after = self.used
            return []
        order = self._order()
        taken = order[: max(min(self._fewest(order), len(order)), self.least)]
        chosen = set(taken)
        self.unseen = [i for i in self.unseen if i not in chosen]
        self.rounds += 1
        return taken

    def _fewest(self, order: Sequence[str], way: bool | None = None) -> int:
        """How many samples from the start of `order` could settle the decision (that way, or either), at the
        fewest."""
        wins, losses = len(self.wins), len(self.losses)
        possible_wins, possible_losses = self.possible
        could_win = could_lose = 0
        for n, sample in enumerate(order, start=1):
            if sample in self.baseline:
                could_lose += 1
            else:
                could_win += 1
            # all of them going its way passes it for good, or all going against it fails it for good
            passes = gate_passes(wins + could_win, losses + possible_losses - could_lose, self.alpha)
            fails = not gate_passes(wins + possible_wins - could_win, losses + could_lose, self.alpha)
            if (passes and way is not False) or (fails and way is not True):
                return n
        return len(order) + 1

    def rest(self) -> list[str]:
        """Every id not evaluated yet, once the decision is settled (an accepted step's traces are the next
        baseline): the tally then covers the whole split."""
        taken, self.unseen = self.unseen, []
        return taken

    def add(self, ids: Sequence[str], right: Collection[str], lost: Collection[str]) -> None:
        """The proposal's outcome on evaluated samples: which it got right, which were lost to failed calls."""
        for sample in ids:
            before = sample in self.baseline
            self.seen[before] += 1
            if sample in right:
                self.right.append(sample)
                if not before:
                    self.wins.append(sample)
            elif sample in lost:
                self.lost.append(sample)
            elif before:
                self.losses.append(sample)

    def _order(self) -> list[str]:
        """The samples left, the likelier movers first. Before any outcome: the current pipeline's right ones
        when all of them tying could pass it sooner than all its wrong ones tying could fail it, else those. Then by the outcomes so far
        (rates with one prior each): toward a pass, a tie on a sample the current pipeline gets right or a
        win; toward a failure, a loss or a tie on one it gets wrong."""
        if not self.used:
            right_first = self._fewest(self._grouped(True), way=True) < self._fewest(self._grouped(False), way=False)
            return self._grouped(right_first)
        win_rate = (len(self.wins) + 1) / (self.seen[False] + 2)
        loss_rate = (len(self.losses) + 1) / (self.seen[True] + 2)
        possible_wins, possible_losses = self.possible
        expected = (
            round(len(self.wins) + win_rate * possible_wins),
            round(len(self.losses) + loss_rate * possible_losses),
        )
        if gate_passes(*expected, self.alpha):
            right_first = 1 - loss_rate >= win_rate
        else:
            right_first = loss_rate >= 1 - win_rate
        return self._grouped(right_first)

    def _grouped(self, right_first: bool) -> list[str]:
        """The samples left, those the current pipeline gets right first (or last), each group in drawn order."""
        return sorted(self.unseen, key=lambda i: (i in self.baseline) != right_first)

    def to_json(self) -> dict:
        """The tally as the run record keeps it: outcomes so far, and how many samples the decision took."""
        return {
            "wins": sorted(self.wins),
            "losses": sorted(self.losses),
            "p": self.p,
            "alpha": self.alpha,
            "lost": sorted(self.lost),
            "right": sorted(self.right),
            "samples": self.used,
            "decided_after": self.used if self.decided_after is None else self.decided_after,
            "of": self.size,
            "rounds": self.rounds,
        }
