"""The colour stage: the colour space each usable row's image declares, as columns of the source's
table (``core.schema.COLOUR_COLUMNS``), read from the image header alone (no pixels decoded).

It runs with the phashes. A table made before the columns existed gets them on its next run,
filled for every row once; after that only new or changed images are read. The export reads
``colour_space`` to re-export exactly the rows whose pixels the sRGB conversion changes.
"""

from __future__ import annotations

import pyarrow as pa

from prx_data.core.schema import COLOUR_COLUMNS
from prx_data.imaging.colour import COLOUR_VERSION, identify
from prx_data.imaging.decode import DecodeError, read_header
from prx_data.stages.column_stage import ColumnStage, StageStats
from prx_data.stages.executors import Executor, run_image_stage

# Follows the image bytes, like the phash; rows read by older code do not exist (null version).
COLOUR_STAGE = ColumnStage(name="colour", columns=COLOUR_COLUMNS, current={"colour_version": COLOUR_VERSION}, inputs=("image_sha256",))
# Header only: ingest has applied the source's own pixel limit to these rows already.
_NO_LIMIT = 2**62


def colour_row(data: bytes | None) -> dict:
    if not data:
        return {"colour_space": None, "colour_version": COLOUR_VERSION, "colour_error": "no image bytes"}
    try:
        header = read_header(data, _NO_LIMIT)
    except DecodeError as exc:
        return {"colour_space": None, "colour_version": COLOUR_VERSION, "colour_error": str(exc)[:300]}
    colour = identify(header.image)
    return {"colour_space": colour.space, "colour_version": COLOUR_VERSION, "colour_error": colour.error}


def colour_rows(sample_ids: list[str], images: list[bytes | None], _rows: pa.Table) -> pa.Table:
    rows = [colour_row(data) for data in images]
    columns = {name: pa.array([r[name] for r in rows], pa.string()) for name in COLOUR_COLUMNS.names}
    return pa.table({"sample_id": pa.array(sample_ids, pa.string()), **columns})


def read_colour_spaces(
    table_uri: str,
    *,
    executor: Executor = "ray",
    chunk_rows: int = 256,
    storage_options: dict | None = None,
    progress=None,
    run_id: str | None = None,
    task_resources: dict[str, float] | None = None,
    local_max_rows: int | None = None,
) -> StageStats:
    """Fill ``colour_space`` for every usable row that lacks a current one."""
    return run_image_stage(
        table_uri,
        COLOUR_STAGE,
        colour_rows,
        error_column="colour_error",
        executor=executor,
        chunk_rows=chunk_rows,
        storage_options=storage_options,
        progress=progress,
        run_id=run_id,
        task_resources=task_resources,
        local_max_rows=local_max_rows,
    )
