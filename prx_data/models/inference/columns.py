"""The columns a model stage writes, named once (value, model, version, error), and results as
Arrow: what a Ray ``map_batches`` function or a chunk task returns, ``sample_id`` (to merge on,
never a row address) plus those columns.

Which rows a stage redoes is decided in one place for every stage, by
:class:`prx_data.stages.column_spec.ColumnStage` (its pending filter, pushed down into the Lance
scan): a row with no value, a value made by another model or version, or an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import pyarrow as pa

from prx_data.models.inference.backend import ModelResult


class DerivedColumns(NamedTuple):
    value: str
    model: str
    version: str
    error: str


def results_table(
    columns: DerivedColumns, schema: pa.Schema, sample_ids: Sequence[str], results: Sequence[ModelResult], model_id: str, version: str
) -> pa.Table:
    """``sample_id`` plus a stage's value, model, version and error columns, typed by ``schema``."""
    if len(sample_ids) != len(results):
        raise ValueError(f"{len(sample_ids)} sample ids for {len(results)} results")
    n = len(results)
    return pa.table(
        {
            "sample_id": list(sample_ids),
            columns.value: [r.value for r in results],
            columns.model: [model_id] * n,
            columns.version: [version] * n,
            columns.error: [r.error for r in results],
        },
        schema=schema,
    )


__all__ = ["DerivedColumns", "results_table"]
