"""Counting over Arrow columns, so a whole source's values never become Python objects (a
50 M-row source holds ~50 GB of captions): value counts, reason codes, and caption lengths in
words as a histogram ({words: captions}; its order statistics are in ``core.histogram``)."""

from __future__ import annotations

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
