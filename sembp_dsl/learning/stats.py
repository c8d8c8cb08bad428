"""The few statistics sbpc decides with: an exact sign test for the gate, an exact test of non-inferiority for a
step that makes the pipeline cheaper, paired intervals for reports.

No SciPy: each is a few lines, and exact where it matters (small gate splits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def sign_test(wins: int, losses: int) -> float:
    """One-sided exact sign test: the chance of at least `wins` wins in `wins + losses` fair coin flips."""
    n = wins + losses
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n


# a sum of score changes this close to 0 is 0: tenths added as floats miss it by far less
NO_GAIN = 1e-9


def gate_passes(wins: int, losses: int, alpha: float, gain: float | None = None) -> bool:
    """The gate's rule: more wins than losses, and not by chance (at alpha = 1: any net gain, the paper's rule);
    and the mean score rises: `gain`, the sum of the score changes, above 0. With scores of 0 or 1 (gain None)
    that is wins beating losses; with partial credit a few small wins could otherwise outvote a large loss."""
    return wins > losses and (gain is None or gain > NO_GAIN) and sign_test(wins, losses) <= alpha


def noninferiority_p(losses: int, samples: int, margin: float) -> float:
    """One-sided exact binomial test of "the step loses at least `margin` of accuracy": the chance of at most
    `losses` samples scoring lower in `samples`, were each to score lower with chance `margin`. Scores lie in
    [0, 1], so a mean drop of `margin` or more needs a drop on at least that share of samples: rejecting that
    share rejects the drop. Wins are not counted, which only makes the test stricter."""
    return sum(math.comb(samples, k) * margin**k * (1 - margin) ** (samples - k) for k in range(losses + 1))


@dataclass(frozen=True)
class Superiority:
    """The gate's rule for a step that must do better: `gate_passes`, its p the sign test's."""

    alpha: float

    def passes(self, wins: int, losses: int, gain: float | None = None) -> bool:
        return gate_passes(wins, losses, self.alpha, gain)

    def p(self, wins: int, losses: int) -> float:
        return sign_test(wins, losses)


@dataclass(frozen=True)
class NonInferiority:
    """The gate's rule for a step that may do as well for less: on `samples` gate samples, its losses must be
    few enough that a drop of `margin` in accuracy is rejected at `alpha` (`noninferiority_p`)."""

    alpha: float
    margin: float
    samples: int

    def passes(self, wins: int, losses: int, gain: float | None = None) -> bool:
        return self.p(wins, losses) <= self.alpha

    def p(self, wins: int, losses: int) -> float:
        return noninferiority_p(losses, self.samples, self.margin)


def wins_needed(alpha: float) -> int:
    """The fewest wins, with no loss, that pass the sign test at `alpha`."""
    wins = 1
    while sign_test(wins, 0) > alpha:
        wins += 1
    return wins


# Student's t at 97.5% (two-sided 95%) for 1 to 30 degrees of freedom
# fmt: off
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)
# fmt: on


def t975(df: int) -> float:
    """The t quantile of a two-sided 95% interval: a table to 30 degrees of freedom, then Cornish-Fisher."""
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def t_interval(values: Sequence[float]) -> tuple[float, float | None, float | None]:
    """Mean with a 95% Student t interval (over seeds, say); no interval from fewer than two values."""
    n = len(values)
    if n == 0:
        raise ValueError("no values")
    mean = sum(values) / n
    if n < 2:
        return (mean, None, None)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return (mean, mean - half, mean + half)
