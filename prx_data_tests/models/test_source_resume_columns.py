from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from prx_data.core.schema import CAPTION_COLUMNS, LABEL_COLUMNS
from prx_data.models.captioning.base import BaseCaptioner
from prx_data.models.captioning.caption_columns import CAPTION_TABLE_SCHEMA, caption_results_table
from prx_data.models.captioning.config import VLLMCaptionerConfig
from prx_data.models.captioning.factory import make_captioner
from prx_data.models.captioning.prompt import caption_prompt_version
from prx_data.models.captioning.source import SourceCaptioner
from prx_data.stages.caption_stage import caption_stage
from prx_data.stages.column_stage import pending_rows


def test_source_backend_keeps_source_captions_and_flags_missing_ones():
    captioner = make_captioner({"backend": "source"})
    assert isinstance(captioner, SourceCaptioner) and isinstance(captioner, BaseCaptioner)
    assert captioner.model_id == "source"
    results = captioner.caption_batch([{"source_caption": "A cat on a mat"}, {"source_caption": None}, {}, {"source_caption": "\t"}])
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
    captioner = SourceCaptioner()
    results = captioner.caption_batch(batch.to_pylist())
    out = caption_results_table(batch["sample_id"].to_pylist(), results, captioner.model_id, captioner.version)
    assert out.schema == CAPTION_TABLE_SCHEMA
    assert out.schema.names[1:] == CAPTION_COLUMNS.names
    assert out.to_pylist() == [
        {
            "sample_id": "a",
            "caption": "short alt text",
            "caption_model": "source",
            "caption_prompt_version": "source",
            "caption_error": None,
        },
        {
            "sample_id": "b",
            "caption": None,
            "caption_model": "source",
            "caption_prompt_version": "source",
            "caption_error": "no_source_caption",
        },
    ]


V = caption_prompt_version()
ROWS: list[dict[str, Any]] = [
    {"caption": None, "caption_model": None, "caption_prompt_version": None, "caption_error": None},
    {"caption": "ok", "caption_model": "m", "caption_prompt_version": V, "caption_error": None},
    {"caption": "ok", "caption_model": "other", "caption_prompt_version": V, "caption_error": None},
    {"caption": "ok", "caption_model": "m", "caption_prompt_version": "v0", "caption_error": None},
    {"caption": None, "caption_model": "m", "caption_prompt_version": V, "caption_error": "truncated"},
    {"caption": "ok", "caption_model": None, "caption_prompt_version": V, "caption_error": None},
]
EXPECTED = [True, False, True, True, True, True]


def _table(tmp_path, rows, status="ok"):
    import lance

    schema = pa.schema([pa.field("sample_id", pa.string()), pa.field("status", pa.string()), *CAPTION_COLUMNS])
    data = [{"sample_id": str(i), "status": status, **row} for i, row in enumerate(rows)]
    return lance.write_dataset(pa.Table.from_pylist(data, schema=schema), tmp_path / "t.lance")


@pytest.mark.parametrize("model_id", ["m", "it's"])
def test_the_caption_stage_redoes_missing_stale_and_failed_rows(tmp_path, model_id):
    """The live resume path: the caption stage's pending filter, pushed into the Lance scan."""
    rows = [{**r, "caption_model": model_id if r["caption_model"] == "m" else r["caption_model"]} for r in ROWS]
    ds = _table(tmp_path, rows)
    stage = caption_stage(VLLMCaptionerConfig(model_id=model_id))
    picked = pending_rows(ds, stage, exclude=set())
    assert sorted(picked["sample_id"].to_pylist()) == [str(i) for i, e in enumerate(EXPECTED) if e]
    # Rows already staged by an interrupted run are not sent again.
    assert "0" not in pending_rows(ds, stage, exclude={"0"})["sample_id"].to_pylist()


def test_unusable_rows_are_never_captioned(tmp_path):
    ds = _table(tmp_path, ROWS[:1], status="bad_image")
    assert pending_rows(ds, caption_stage(VLLMCaptionerConfig(model_id="m")), exclude=set()).num_rows == 0


def test_fused_captions_own_the_label_columns_and_a_version_of_their_own():
    plain, fused = caption_stage(VLLMCaptionerConfig()), caption_stage(VLLMCaptionerConfig(fused_label=True))
    assert "label" in plain.invalidates and not fused.invalidates
    assert set(LABEL_COLUMNS.names) <= set(fused.columns.names)
    assert fused.current["caption_prompt_version"] != plain.current["caption_prompt_version"]
