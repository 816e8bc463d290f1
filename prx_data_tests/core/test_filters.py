"""Filters are pyarrow expressions: any value matches itself exactly on a real Lance table."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

from prx_data.core import filters as F
from prx_data.stages.column_stage import ColumnStage

NASTY = ["plain", "it's", "it''s", "back\\slash", "trail\\", "ünïcødé ☃ 画像", 'quo"te', "%_like*", "a' OR '1'='1", "", "new\nline"]


@pytest.fixture
def ds(tmp_path) -> lance.LanceDataset:
    values = NASTY + [None]
    table = pa.table({"v": values, "n": list(range(len(values))), "status": ["ok"] * len(values)})
    return lance.write_dataset(table, str(tmp_path / "t"))


def _ns(ds, expr) -> list[int]:
    return sorted(ds.to_table(columns=["n"], filter=expr).column("n").to_pylist())


@pytest.mark.parametrize("i", range(len(NASTY)))
def test_equals_matches_exactly_the_one_row(ds, i) -> None:
    assert _ns(ds, F.equals("v", NASTY[i])) == [i]
    assert ds.count_rows(filter=F.equals("v", NASTY[i])) == 1


def test_one_of_and_differs_keep_sql_semantics(ds) -> None:
    assert _ns(ds, F.one_of("v", [NASTY[1], NASTY[3], "absent"])) == [1, 3]
    assert _ns(ds, F.one_of("v", [])) == []
    # Null counts as "differs" (stale), as `col IS NULL OR col != value` did.
    assert _ns(ds, F.differs("v", "plain")) == list(range(1, len(NASTY) + 1))
    assert _ns(ds, F.all_of(F.is_set("v"), F.differs("v", "plain"))) == list(range(1, len(NASTY)))


def test_pending_rows_with_a_model_name_full_of_quotes(tmp_path) -> None:
    model = 'o\'brien\\vl ☃ "v2"'
    table = pa.table(
        {
            "sample_id": ["a", "b", "c", "d"],
            "status": ["ok", "ok", "ok", "failed"],
            "caption_model": [model, "other", None, None],
            "caption_error": pa.array([None, None, None, None], pa.string()),
        }
    )
    ds = lance.write_dataset(table, str(tmp_path / "t"))
    stage = ColumnStage(name="caption", columns=pa.schema([]), current={"caption_model": model}, redo_if_set=("caption_error",))
    pending = ds.to_table(columns=["sample_id"], filter=stage.pending_filter()).column("sample_id").to_pylist()
    assert sorted(pending) == ["b", "c"]
    assert ds.to_table(columns=["sample_id"], filter=stage.current_filter()).column("sample_id").to_pylist() == ["a"]
    # The run judges its scan's batches in Arrow: the same rows as the filter.
    eligible = ds.to_table(columns=["sample_id", *stage.condition_columns], filter=stage.eligible)
    assert sorted(eligible.filter(stage.stale(eligible)).column("sample_id").to_pylist()) == ["b", "c"]
