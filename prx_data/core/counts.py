"""Counting over Arrow columns, so a whole source's values never become Python objects (a
50 M-row source holds ~50 GB of captions): value counts, reason codes, and caption lengths in
words as a histogram ({words: captions}) whose order statistics come out the same as
``statistics`` gives on the full list."""

from __future__ import annotations

import bisect
import itertools
from collections import Counter

import pyarrow as pa
import pyarrow.compute as pc


def value_counter(values: pa.Array | pa.ChunkedArray) -> Counter:
    """{value: rows} of ``values``, nulls left out."""
    counts = pc.value_counts(pc.drop_null(values))
    return Counter(dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist())))


def reason_codes(reasons: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """:func:`prx_data.core.reasons.reason_code` of each reason string (what precedes the first ``:``)."""
    return pc.list_element(pc.split_pattern(reasons, ":", max_splits=1), 0)


def words_per_caption(captions: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``len(caption.split())`` of each caption, null where the caption is null."""
    text = pc.utf8_trim_whitespace(captions)
    # str.split()'s count: runs of whitespace are one separator, none at the ends.
    return pc.if_else(pc.equal(text, ""), 0, pc.list_value_length(pc.utf8_split_whitespace(text)))


def word_histogram(captions: pa.Array | pa.ChunkedArray) -> Counter[int]:
    """{words: captions} of the non-null ``captions``."""
    captions = captions.drop_null()
    return value_counter(words_per_caption(captions)) if len(captions) else Counter()


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
