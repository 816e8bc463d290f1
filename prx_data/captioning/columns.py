"""Captioner results as Arrow columns (:data:`prx_data.schema.CAPTION_COLUMNS`).

What a Ray ``map_batches`` function or a Lance ``add_columns`` UDF returns: ``sample_id`` (to
merge on, never a row address) plus the caption columns.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from prx_data.captioning.base import CaptionResult, Captioner
from prx_data.schema import CAPTION_COLUMNS

CAPTION_TABLE_SCHEMA = pa.schema(
    [pa.field("sample_id", pa.string(), nullable=False), *CAPTION_COLUMNS]
)


def caption_results_table(
    sample_ids: Sequence[str], results: Sequence[CaptionResult], model_id: str, prompt_version: str
) -> pa.Table:
    if len(sample_ids) != len(results):
        raise ValueError(f"{len(sample_ids)} sample ids for {len(results)} results")
    n = len(results)
    return pa.table(
        {
            "sample_id": list(sample_ids),
            "caption": [r.caption for r in results],
            "caption_model": [model_id] * n,
            "caption_prompt_version": [prompt_version] * n,
            "caption_error": [r.error for r in results],
        },
        schema=CAPTION_TABLE_SCHEMA,
    )


def caption_table(captioner: Captioner, batch: pa.Table | pa.RecordBatch) -> pa.Table:
    """Caption an Arrow batch with ``sample_id``, ``image`` and (optionally) ``source_caption``."""
    wanted = [c for c in ("sample_id", "image", "source_caption") if c in batch.schema.names]
    rows = batch.select(wanted).to_pylist()
    results = captioner.caption_batch(rows)
    return caption_results_table(
        [row["sample_id"] for row in rows], results, captioner.model_id, captioner.prompt_version
    )
