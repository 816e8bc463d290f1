"""Classifier results as Arrow columns (:data:`prx_data.core.schema.LABEL_COLUMNS`), keyed by
``sample_id``."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from prx_data.core.schema import LABEL_COLUMNS
from prx_data.models.derived_columns import LABEL
from prx_data.models.inference.columns import results_table
from prx_data.models.labeling.base import LabelResult

LABEL_TABLE_SCHEMA = pa.schema([pa.field("sample_id", pa.string(), nullable=False), *LABEL_COLUMNS])
_SCORE = "label_score"


def label_results_table(sample_ids: Sequence[str], results: Sequence[LabelResult], model_id: str, label_version: str) -> pa.Table:
    base_schema = LABEL_TABLE_SCHEMA.remove(LABEL_TABLE_SCHEMA.get_field_index(_SCORE))
    table = results_table(LABEL, base_schema, sample_ids, results, model_id, label_version)
    return with_label_score(table, [r.score for r in results])


def with_label_score(table: pa.Table, scores: Sequence[float | None] | None = None) -> pa.Table:
    """``table`` with a ``label_score`` column (all null when a backend gives no score)."""
    field = LABEL_TABLE_SCHEMA.field(_SCORE)
    if _SCORE in table.column_names:
        return table
    values = pa.array(scores if scores is not None else [None] * table.num_rows, field.type)
    return table.append_column(field, values)
