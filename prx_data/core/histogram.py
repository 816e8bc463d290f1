"""Order statistics of a histogram ({value: count}) that come out the same as ``statistics``
gives on the list it counts, without expanding it (``core.counts`` makes the histograms from
Arrow columns)."""

from __future__ import annotations

import bisect
import itertools
from collections import Counter


class SortedHistogram:
    """``data[i]``: the i-th smallest value (0-based) of the list a histogram counts, without
    expanding it; ``total`` is that list's length."""

    def __init__(self, histogram: Counter[int]) -> None:
        self.values = sorted(histogram)
        self.ends = list(itertools.accumulate(histogram[v] for v in self.values))
        self.total = self.ends[-1] if self.ends else 0

    def __getitem__(self, i: int) -> int:
        return self.values[bisect.bisect_right(self.ends, i)]


def median(histogram: Counter[int]) -> float:
    """``statistics.median`` of the list the histogram counts (0 for an empty one)."""
    data = SortedHistogram(histogram)
    if not data.total:
        return 0
    half = data.total // 2
    return data[half] if data.total % 2 else (data[half - 1] + data[half]) / 2


def summary_row(histogram: Counter[int]) -> tuple:
    """(min, p10, median, p90, max), the deciles as ``statistics.quantiles(n=10)`` (method
    "exclusive") gives them, rounded."""
    data = SortedHistogram(histogram)
    if data.total == 1:
        q: list[float] = [data[0]] * 9
    else:
        q = []
        for i in range(1, 10):
            j = min(max(i * (data.total + 1) // 10, 1), data.total - 1)
            delta = i * (data.total + 1) - j * 10
            q.append((data[j - 1] * (10 - delta) + data[j] * delta) / 10)
    return (data.values[0], round(q[0]), median(histogram), round(q[8]), data.values[-1])
