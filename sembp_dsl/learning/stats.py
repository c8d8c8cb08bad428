"""The few statistics sbpc decides with: an exact sign test for the gate, an exact test of non-inferiority for a
step that makes the pipeline cheaper, paired intervals for reports.

No SciPy: each is a few lines, and exact where it matters (small gate splits).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist


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


def restricted_loss_rate(up: float, down: float, answered: int, margin: float) -> float:
    """The likeliest share of losses were the step exactly `margin` worse (wins = losses - margin): the root of
    the score equation of a trinomial (win, loss, tie) under that constraint, kept inside its range."""
    ties = answered - up - down
    b = up * (1 + margin) + down * (1 + 3 * margin) + 2 * ties * margin
    c = down * margin * (1 + margin)
    root = (b + math.sqrt(max(b * b - 8 * answered * c, 0.0))) / (4 * answered)
    return min(max(root, margin), (1 + margin) / 2)


def noninferiority_z(up: float, down: float, answered: int, margin: float) -> float:
    """The restricted-MLE score statistic (Nam, Tango) of "the step loses `margin` of the mean score": the
    mean change plus the margin over its standard error at the likeliest rates with that loss. `up` and `down`
    are the sums of the score rises and falls (wins and losses with scores of 0 or 1): a change in [-1, 1] with
    those masses varies at most as a trinomial does, so partial credit only makes the test stricter."""
    if answered <= 0:
        return -math.inf
    loss_rate = restricted_loss_rate(up, down, answered, margin)
    variance = 2 * loss_rate - margin - margin * margin
    return (up - down + answered * margin) / math.sqrt(answered * variance)


_NORMAL = NormalDist()
NUISANCE_POINTS = 61  # loss rates the exact size is taken over, from `margin` (no wins) to no ties
GRID_SLACK = 0.99  # the size on those points is held to 0.99 alpha: between them it may rise a little (< 0.2%)


def _trinomial_cells(answered: int, margin: float, floor: float) -> list[tuple[float, int, int]]:
    """(z, wins, losses) of every outcome of `answered` samples whose z is at least `floor`, highest z first. z
    grows with the wins at any number of losses (checked over sizes to 400 and margins 0.01 to 0.5), so each
    number of losses is read from the most wins down, until z falls below the floor."""
    cells = []
    for losses in range(answered + 1):
        for wins in range(answered - losses, -1, -1):
            z = noninferiority_z(wins, losses, answered, margin)
            if z < floor:
                break
            cells.append((z, wins, losses))
    return sorted(cells, reverse=True)


@lru_cache(maxsize=4096)
def critical_z(answered: int, margin: float, alpha: float) -> float:
    """The least z that rejects "`margin` worse" with exact size at most `alpha` on `answered` samples: the
    outcomes are taken by z, highest first, while the chance of all taken stays within `alpha` at every loss
    rate the null allows (an exact unconditional test; the score test's normal quantile alone runs up to 1.3
    alpha at the sizes a gate has). inf: no outcome of so few samples can pass."""
    if margin <= 0 or answered <= 0 or alpha <= 0:
        return math.inf
    if alpha >= 1:
        return -math.inf
    return _exact_critical(answered, margin, alpha, _NORMAL.inv_cdf(1 - alpha) - 1.0)


def _exact_critical(answered: int, margin: float, alpha: float, floor: float) -> float:
    """`critical_z` among the outcomes whose z is at least `floor` (the least z taken, inf when none fits)."""
    logf = [math.lgamma(k + 1) for k in range(answered + 1)]
    rates = [margin + ((1 + margin) / 2 - margin) * i / (NUISANCE_POINTS - 1) for i in range(NUISANCE_POINTS)]
    logs = [(_log(rate - margin), _log(rate), _log(1 - 2 * rate + margin)) for rate in rates]
    size = [0.0] * NUISANCE_POINTS
    cells = _trinomial_cells(answered, margin, floor)
    critical = math.inf
    for k, (z, wins, losses) in enumerate(cells):
        ties = answered - wins - losses
        base = logf[answered] - logf[wins] - logf[losses] - logf[ties]
        for i, (log_win, log_loss, log_tie) in enumerate(logs):
            log_p = base + _times(wins, log_win) + _times(losses, log_loss) + _times(ties, log_tie)
            size[i] += math.exp(log_p) if log_p > -700 else 0.0
        if max(size) > alpha * GRID_SLACK:
            return critical
        if k + 1 == len(cells) or cells[k + 1][0] < z - 1e-12:  # a z shared by several outcomes takes them all
            critical = z
    return critical


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


def _times(count: int, log: float) -> float:
    """count * log, where 0 * log 0 is 0."""
    return 0.0 if count == 0 else count * log


def step_alpha(alpha: float, iteration: int, iterations: int, spent: float) -> float:
    """The level iteration `iteration` (from 1) of `iterations` tests its step at, so that the chance a run accepts
    any step not truly better is at most `alpha`: each iteration adds `alpha / iterations` to the level, and only a
    rejected step uses its level up (`spent`: the sum of the levels of the steps rejected so far). A step accepted,
    or no step at all, passes its level on (a fallback procedure: along any run, the levels at which steps that are
    not better are tested, up to the first one accepted, add up to at most `alpha`). At alpha 1 (no test, the
    paper's rule) nothing is spent."""
    if alpha >= 1:
        return alpha
    share = alpha * min(max(iteration, 1), max(iterations, 1)) / max(iterations, 1)
    return max(share - spent, 0.0)


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
    """The gate's rule for a step that may do as well for less (a cheaper model): the score test of "the step
    loses `margin` of the mean score" rejected at exact size `alpha` (`critical_z`). Only samples answered on
    both sides are evidence (`answered`); a sample the step itself lost (a call of its model that failed) is
    charged to the margin, as in use it would get no answer: the step must hold `margin - lost share` on the
    rest, so a model failing on more of the split than the margin cannot pass."""

    alpha: float
    margin: float
    samples: int  # the split's size, which the lost share is a share of

    def effective_margin(self, proposal_lost: int) -> float:
        return round(self.margin - proposal_lost / max(self.samples, 1), 9)

    def z(self, up: float, down: float, answered: int, proposal_lost: int = 0) -> float:
        margin = self.effective_margin(proposal_lost)
        return noninferiority_z(up, down, answered, margin) if margin > 0 else -math.inf

    def critical(self, answered: int, proposal_lost: int = 0) -> float:
        return critical_z(answered, self.effective_margin(proposal_lost), self.alpha)

    def passes(self, up: float, down: float, answered: int, proposal_lost: int = 0) -> bool:
        """At alpha 1 (no test, the paper's spirit) the step passes when its mean does not fall."""
        if self.alpha >= 1:
            return answered > 0 and up - down >= -NO_GAIN
        z = self.z(up, down, answered, proposal_lost)
        return z > -math.inf and z >= self.critical(answered, proposal_lost)

    def p(self, up: float, down: float, answered: int, proposal_lost: int = 0) -> float:
        """The score test's p (normal): what the record shows beside the exact critical value."""
        return 1 - _NORMAL.cdf(self.z(up, down, answered, proposal_lost))

    def least_split(self) -> int | None:
        """The fewest answered samples on which any outcome passes (all ties does, first); None past 2,000."""
        return least_split(self.margin, self.alpha)


@lru_cache(maxsize=256)
def least_split(margin: float, alpha: float) -> int | None:
    """`NonInferiority.least_split`. Only the outcomes at least as extreme as all ties are summed at a size (all
    ties passes when they all fit within alpha); the sizes are searched by doubling steps, then halving, from
    where the all-ties z nears the normal quantile (the test's discreteness may let a size just below pass too:
    the warnings that name it are about that precise)."""
    if not 0 < alpha or margin <= 0:
        return None
    if alpha >= 1:
        return 1
    floor = _NORMAL.inv_cdf(1 - alpha) - 0.5
    low = next((n for n in range(1, 2001) if noninferiority_z(0, 0, n, margin) >= floor), 2001) - 1
    high, step = low + 1, 1  # sizes above `low` doubling their step until all ties passes, then halved back
    while not _ties_pass(high, margin, alpha):
        if high >= 2000:
            return None
        low, high, step = high, min(high + step, 2000), step * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if _ties_pass(middle, margin, alpha) else (middle, high)
    return high


def _ties_pass(answered: int, margin: float, alpha: float) -> bool:
    z = noninferiority_z(0, 0, answered, margin)  # all ties: the outcome likeliest to pass
    return _exact_critical(answered, margin, alpha, z - 1e-9) <= z


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
