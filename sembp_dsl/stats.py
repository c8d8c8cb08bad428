"""The few statistics sbpc decides with: an exact sign test for the gate, paired intervals for reports.

No SciPy: each is a few lines, and exact where it matters (small gate splits).
"""

from __future__ import annotations

import math
from typing import Sequence


def sign_test(wins: int, losses: int) -> float:
    """One-sided exact sign test: the chance of at least `wins` wins in `wins + losses` fair coin flips."""
    n = wins + losses
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2**n


def gate_passes(wins: int, losses: int, alpha: float) -> bool:
    """The gate's rule: more wins than losses, and not by chance (at alpha = 1: any net gain, the paper's rule)."""
    return wins > losses and sign_test(wins, losses) <= alpha


def wins_needed(alpha: float) -> int:
    """The fewest wins, with no loss, that pass the sign test at `alpha`."""
    wins = 1
    while sign_test(wins, 0) > alpha:
        wins += 1
    return wins


def paired_interval(differences: Sequence[float], z: float = 1.96) -> tuple[float, float, float]:
    """Mean of per-sample differences (after - before) with a normal 95% interval around it."""
    n = len(differences)
    if n == 0:
        return (0.0, 0.0, 0.0)
    mean = sum(differences) / n
    var = sum((d - mean) ** 2 for d in differences) / (n - 1) if n > 1 else 0.0
    half = z * math.sqrt(var / n)
    return (mean, mean - half, mean + half)
