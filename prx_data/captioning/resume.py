"""Resumability: which rows still need a caption (or a label).

A row needs work when it has no value, or the value was made by another model or another
prompt version, or the last attempt left an error. Rows are keyed by ``sample_id`` elsewhere;
this module only answers "redo this row?".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.filters import sql_string


class DerivedColumns(NamedTuple):
    value: str
    model: str
    version: str
    error: str


CAPTION = DerivedColumns("caption", "caption_model", "caption_prompt_version", "caption_error")
LABEL = DerivedColumns("label", "label_model", "label_version", "label_error")


@overload
def needs_redo(
    data: Mapping[str, Any], columns: DerivedColumns, model_id: str, version: str
) -> bool: ...
@overload
def needs_redo(
    data: pa.Table | pa.RecordBatch, columns: DerivedColumns, model_id: str, version: str
) -> np.ndarray: ...


def needs_redo(data, columns, model_id, version):
    """A bool for a row mapping; a numpy bool mask for an Arrow table or record batch.

    A missing column counts as all-null: a table that never ran the stage needs all rows.
    """
    if isinstance(data, Mapping):
        return (
            data.get(columns.value) is None
            or data.get(columns.model) != model_id
            or data.get(columns.version) != version
            or data.get(columns.error) is not None
        )
    if not isinstance(data, (pa.Table, pa.RecordBatch)):
        raise TypeError(f"expected a row mapping or an Arrow table/batch, got {type(data)!r}")
    names = set(data.schema.names)
    if not {columns.value, columns.model, columns.version, columns.error} <= names:
        return np.ones(data.num_rows, dtype=bool)
    mask = pc.or_(
        pc.or_(
            pc.is_null(data[columns.value]),
            pc.fill_null(pc.not_equal(data[columns.model], model_id), True),
        ),
        pc.or_(
            pc.fill_null(pc.not_equal(data[columns.version], version), True),
            pc.is_valid(data[columns.error]),
        ),
    )
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def needs_caption(data, model_id: str, prompt_version: str):
    """Rows to (re)caption with ``model_id`` at ``prompt_version`` (bool, or numpy mask)."""
    return needs_redo(data, CAPTION, model_id, prompt_version)


def redo_filter(columns: DerivedColumns, model_id: str, version: str) -> str:
    """The same test as an SQL predicate for a Lance scan filter (pushed down, so the image
    blobs of rows that are done are never read). The columns must exist in the table."""
    return (
        f"{columns.value} IS NULL OR {columns.model} IS NULL OR {columns.version} IS NULL "
        f"OR {columns.model} != {sql_string(model_id)} "
        f"OR {columns.version} != {sql_string(version)} "
        f"OR {columns.error} IS NOT NULL"
    )


def needs_caption_filter(model_id: str, prompt_version: str) -> str:
    return redo_filter(CAPTION, model_id, prompt_version)
