"""The statistics a report shows: a mean with its confidence interval, a histogram, percentiles.

Plain functions over lists of numbers, no dependency: the confidence interval
of a mean is Wilson's score interval when every score is 0 or 1 (a pass rate),
and Student's t interval otherwise, both at 95 %.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z_95 = 1.959963984540054
"""The standard normal's 97.5th percentile: a two-sided 95 % interval."""
_T_975 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    11: 2.201,
    12: 2.179,
    13: 2.160,
    14: 2.145,
    15: 2.131,
    16: 2.120,
    17: 2.110,
    18: 2.101,
    19: 2.093,
    20: 2.086,
    21: 2.080,
    22: 2.074,
    23: 2.069,
    24: 2.064,
    25: 2.060,
    26: 2.056,
    27: 2.052,
    28: 2.048,
    29: 2.045,
    30: 2.042,
    40: 2.021,
    60: 2.000,
    120: 1.980,
}
"""Student's t 97.5th percentiles by degrees of freedom (printed tables)."""
DISTINCT_BARS = 12
"""Scores with at most this many distinct values get a bar each; more are binned."""
BINS = 20
"""Bins of a histogram of scores with many distinct values."""


def t_975(df: int) -> float:
    """Student's t 97.5th percentile for ``df`` degrees of freedom.

    Exact (to three decimals) up to 30; between the tabulated values above 30,
    interpolated linearly in ``1/df``, which is accurate to about 0.001.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if df in _T_975:
        return _T_975[df]
    known = sorted(_T_975)
    if df > known[-1]:
        low, high, low_t, high_t = known[-1], math.inf, _T_975[known[-1]], Z_95
    else:
        low = max(k for k in known if k < df)
        high = min(k for k in known if k > df)
        low_t, high_t = _T_975[low], _T_975[high]
    share = (1 / low - 1 / df) / (1 / low - (0 if high == math.inf else 1 / high))
    return low_t + (high_t - low_t) * share


@dataclass(frozen=True)
class MeanCI:
    """A mean and its 95 % confidence interval."""

    mean: float
    low: float
    high: float
    n: int
    method: str
    """``"Wilson"`` (scores all 0 or 1), ``"t"`` (Student's t), or ``"none"`` (one score)."""

    def describe(self) -> str:
        """``"0.6250 (95% CI 0.4 to 0.8, n=40, Wilson)"``."""
        if self.method == "none":
            return f"{self.mean:.4f} (n={self.n}, no interval from one score)"
        return (
            f"{self.mean:.4f} (95% CI {self.low:.4f} to {self.high:.4f}, n={self.n:,}, "
            f"{self.method})"
        )


def mean_ci(scores: Sequence[float]) -> MeanCI | None:
    """The mean of ``scores`` with a 95 % confidence interval; ``None`` for no scores."""
    n = len(scores)
    if n == 0:
        return None
    mean = math.fsum(scores) / n
    if n == 1:
        return MeanCI(mean, mean, mean, 1, "none")
    if all(score in (0.0, 1.0) for score in scores):
        # Wilson's score interval: sound near 0 and 1, where mean ± t·s/√n is not.
        z2 = Z_95 * Z_95
        centre = (mean + z2 / (2 * n)) / (1 + z2 / n)
        half = Z_95 * math.sqrt(mean * (1 - mean) / n + z2 / (4 * n * n)) / (1 + z2 / n)
        return MeanCI(mean, max(centre - half, 0.0), min(centre + half, 1.0), n, "Wilson")
    variance = math.fsum((score - mean) ** 2 for score in scores) / (n - 1)
    half = t_975(n - 1) * math.sqrt(variance / n)
    return MeanCI(mean, mean - half, mean + half, n, "t")


@dataclass(frozen=True)
class Bin:
    """One bar of a histogram: scores in ``[low, high)`` (the last bin includes ``high``)."""

    low: float
    high: float
    count: int
    label: str


def _number(value: float) -> str:
    return f"{value:.4g}"


def histogram(scores: Sequence[float]) -> list[Bin]:
    """The histogram of ``scores``: a bar per value when there are few, else ``BINS`` bins."""
    if not scores:
        return []
    values = sorted(set(scores))
    if len(values) <= DISTINCT_BARS:
        each = dict.fromkeys(values, 0)
        for score in scores:
            each[score] += 1
        return [Bin(v, v, each[v], _number(v)) for v in values]
    low, high = values[0], values[-1]
    width = (high - low) / BINS
    counts = [0] * BINS
    for score in scores:
        counts[min(int((score - low) / width), BINS - 1)] += 1
    bins = []
    for index, count in enumerate(counts):
        start, end = low + index * width, low + (index + 1) * width
        closing = "]" if index == BINS - 1 else ")"
        bins.append(Bin(start, end, count, f"[{_number(start)}, {_number(end)}{closing}"))
    return bins


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linearly interpolated between ranks."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    below = math.floor(rank)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (rank - below)
