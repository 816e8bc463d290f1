"""A phrase query (``"red square"``) over a table whose two text columns both have full-text
indexes answers its matches, not the HTTP 500 Lance's "Phrase queries cannot be used with
multiple columns" gave; local and s3:// tables."""

from __future__ import annotations

import lance
import pyarrow as pa

from prx_data.explorer.search import full_text_table

ROWS = [
    ("a", "a red square on a white wall", "photo"),
    ("b", "a square that is red", "a red square"),
    ("c", "blue circle", "red square logo"),
    ("d", "nothing here", "square red"),
]


def test_phrase_search_over_two_indexed_columns(storage_root):
    uri = storage_root.uri("lance", "fts.lance")
    table = pa.table({k: [r[i] for r in ROWS] for i, k in enumerate(("sample_id", "caption", "source_caption"))})
    ds = lance.write_dataset(table, uri, storage_options=storage_root.options)
    for column in ("caption", "source_caption"):
        ds.create_scalar_index(column, "INVERTED", with_position=True)
    ds = lance.dataset(uri, storage_options=storage_root.options)
    columns = {"sample_id": "sample_id", "caption": "caption"}
    got = full_text_table(ds, columns, '"red square"', ["caption", "source_caption"], None, 100)
    ids = got.column("sample_id").to_pylist()
    assert sorted(ids) == ["a", "b", "c"] and len(ids) == len(set(ids))
    scores = got.column("_score").to_pylist()
    assert scores == sorted(scores, reverse=True)
    # Words (no phrase) still search both columns in one query.
    words = full_text_table(ds, columns, "red square", ["caption", "source_caption"], None, 100)
    assert set(words.column("sample_id").to_pylist()) == {"a", "b", "c", "d"}
