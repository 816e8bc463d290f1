from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from pydantic import ValidationError

from prx_data.captioning.base import Captioner
from prx_data.captioning.columns import CAPTION_TABLE_SCHEMA, caption_table
from prx_data.captioning.factory import make_captioner, parse_captioner_config
from prx_data.captioning.resume import needs_caption, needs_caption_filter
from prx_data.captioning.source import SourceCaptioner
from prx_data.schema import CAPTION_COLUMNS


def test_source_backend_keeps_source_captions_and_flags_missing_ones():
    captioner = make_captioner({"backend": "source"})
    assert isinstance(captioner, SourceCaptioner) and isinstance(captioner, Captioner)
    assert captioner.model_id == "source"
    results = captioner.caption_batch(
        [{"source_caption": "A cat on a mat"}, {"source_caption": None}, {}, {"source_caption": "\t"}]
    )
    assert [r.caption for r in results] == ["A cat on a mat", None, None, None]
    assert [r.error for r in results] == [None, "no_source_caption", "no_source_caption", "empty"]


def test_caption_table_has_sample_ids_and_the_schema_columns():
    batch = pa.table(
        {
            "sample_id": ["a", "b"],
            "image": pa.array([b"x", b"y"], pa.large_binary()),
            "source_caption": ["short alt text", None],
        }
    )
    out = caption_table(SourceCaptioner(), batch)
    assert out.schema == CAPTION_TABLE_SCHEMA
    assert out.schema.names[1:] == CAPTION_COLUMNS.names
    assert out.to_pylist() == [
        {"sample_id": "a", "caption": "short alt text", "caption_model": "source",
         "caption_prompt_version": "source", "caption_error": None},
        {"sample_id": "b", "caption": None, "caption_model": "source",
         "caption_prompt_version": "source", "caption_error": "no_source_caption"},
    ]


ROWS = [
    {"caption": None, "caption_model": None, "caption_prompt_version": None, "caption_error": None},
    {"caption": "ok", "caption_model": "m", "caption_prompt_version": "v1", "caption_error": None},
    {"caption": "ok", "caption_model": "other", "caption_prompt_version": "v1", "caption_error": None},
    {"caption": "ok", "caption_model": "m", "caption_prompt_version": "v0", "caption_error": None},
    {"caption": None, "caption_model": "m", "caption_prompt_version": "v1", "caption_error": "truncated"},
    {"caption": "ok", "caption_model": None, "caption_prompt_version": "v1", "caption_error": None},
]
EXPECTED = [True, False, True, True, True, True]


def test_needs_caption_on_rows_and_on_arrow_batches():
    assert [needs_caption(row, "m", "v1") for row in ROWS] == EXPECTED
    table = pa.Table.from_pylist(ROWS, schema=CAPTION_COLUMNS)
    np.testing.assert_array_equal(needs_caption(table, "m", "v1"), EXPECTED)
    np.testing.assert_array_equal(needs_caption(table.to_batches()[0], "m", "v1"), EXPECTED)


def test_a_table_without_caption_columns_needs_every_row():
    table = pa.table({"sample_id": ["a", "b"]})
    assert needs_caption(table, "m", "v1").tolist() == [True, True]


def test_needs_caption_filter_selects_the_same_rows_in_lance(tmp_path):
    lance = pytest.importorskip("lance")
    table = pa.Table.from_pylist(
        [{"sample_id": str(i), **row} for i, row in enumerate(ROWS)],
        schema=pa.schema([pa.field("sample_id", pa.string()), *CAPTION_COLUMNS]),
    )
    ds = lance.write_dataset(table, tmp_path / "t.lance")
    picked = ds.to_table(columns=["sample_id"], filter=needs_caption_filter("m", "v1"))
    assert sorted(picked["sample_id"].to_pylist()) == [str(i) for i, e in enumerate(EXPECTED) if e]
    # Quotes in ids are escaped, not injected.
    assert "'it''s'" in needs_caption_filter("it's", "v1")


def test_configs_are_chosen_by_backend_and_validated():
    cfg = parse_captioner_config(
        {"backend": "openai", "server": {"base_url": "http://x/v1", "model": "qwen"}}
    )
    assert cfg.backend == "openai" and cfg.server.max_concurrency == 16
    with pytest.raises(ValidationError):
        parse_captioner_config({"backend": "nope"})
    with pytest.raises(ValidationError):
        parse_captioner_config({"backend": "source", "typo": 1})
