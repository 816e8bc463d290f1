"""Captioner results as Arrow columns (:data:`prx_data.core.schema.CAPTION_COLUMNS`).

What a Ray ``map_batches`` function or a Lance ``add_columns`` UDF returns: ``sample_id`` (to
merge on, never a row address) plus the caption columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from prx_data.core.schema import CAPTION_COLUMNS
from prx_data.models.captioning.base import CaptionResult
from prx_data.models.derived_columns import CAPTION, DerivedColumns

CAPTION_TABLE_SCHEMA = pa.schema([pa.field("sample_id", pa.string(), nullable=False), *CAPTION_COLUMNS])


def results_table(
    columns: DerivedColumns,
    schema: pa.Schema,
    sample_ids: Sequence[str],
    values: Sequence[str | None],
    errors: Sequence[str | None],
    model_id: str,
    version: str,
) -> pa.Table:
    """``sample_id`` plus a stage's value, model, version and error columns (captions, labels)."""
    if not len(sample_ids) == len(values) == len(errors):
        raise ValueError(f"{len(sample_ids)} sample ids for {len(values)} results")
    n = len(values)
    return pa.table(
        {
            "sample_id": list(sample_ids),
            columns.value: list(values),
            columns.model: [model_id] * n,
            columns.version: [version] * n,
            columns.error: list(errors),
        },
        schema=schema,
    )


def caption_results_table(sample_ids: Sequence[str], results: Sequence[CaptionResult], model_id: str, prompt_version: str) -> pa.Table:
    return results_table(
        CAPTION, CAPTION_TABLE_SCHEMA, sample_ids, [r.caption for r in results], [r.error for r in results], model_id, prompt_version
    )
