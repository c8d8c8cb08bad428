"""What 1,000 samples cost a pipeline, and two pipelines compared on the same samples.

A run keeps the dollars each gate sample cost a pipeline (learning/pricing.py measures them). Two pipelines are
compared only on the samples both ran: the samples a gate stopped at are not the split's average sample, so a mean
over each side's own samples would report a saving the models never made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


def per_thousand(costs: Mapping[str, float] | None) -> float | None:
    """Dollars 1,000 samples cost at the mean of these samples' costs; None when there are none."""
    return 1000 * sum(costs.values()) / len(costs) if costs else None


@dataclass(frozen=True)
class Compared:
    """Two pipelines' cost per 1,000 samples on the same `samples` (None: each on its own, an older record's)."""

    before: float
    after: float
    samples: int | None = None

    @property
    def falls(self) -> bool:
        return self.after < self.before

    def words(self) -> str:
        """'$0.1804 -> $0.1624 (-10%), on the 100 samples both ran'."""
        change = f" ({100 * (self.after - self.before) / self.before:+.0f}%)" if self.before and self.samples else ""
        where = (
            f", on the {self.samples} gate sample{'s' * (self.samples != 1)} both ran"
            if self.samples is not None
            else ""
        )
        return f"${self.before:.4f} -> ${self.after:.4f}{change}{where}"


def compared(before: Mapping[str, float] | None, after: Mapping[str, float] | None) -> Compared | None:
    """The two pipelines' costs on the samples both ran, or None when they share none (or one has no price)."""
    if before is None or after is None:
        return None
    shared = [i for i in after if i in before]
    if not shared:
        return None
    before_total, after_total = sum(before[i] for i in shared), sum(after[i] for i in shared)
    return Compared(1000 * before_total / len(shared), 1000 * after_total / len(shared), len(shared))
