"""Captioner results as Arrow columns (:data:`prx_data.core.schema.CAPTION_COLUMNS`)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from prx_data.core.schema import CAPTION_COLUMNS
from prx_data.models.captioning.base import CaptionResult
from prx_data.models.derived_columns import CAPTION
from prx_data.models.inference.columns import results_table

CAPTION_TABLE_SCHEMA = pa.schema([pa.field("sample_id", pa.string(), nullable=False), *CAPTION_COLUMNS])


def caption_results_table(sample_ids: Sequence[str], results: Sequence[CaptionResult], model_id: str, prompt_version: str) -> pa.Table:
    return results_table(CAPTION, CAPTION_TABLE_SCHEMA, sample_ids, results, model_id, prompt_version)
