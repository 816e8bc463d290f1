"""The phash stage: a DCT hash for every usable row, as columns of the source's table."""

from __future__ import annotations

import pyarrow as pa

from prx_data.core.schema import PHASH_COLUMNS
from prx_data.imaging.phash import PHASH_VERSION, phash_row
from prx_data.stages.column_stage import ColumnStage, StageStats
from prx_data.stages.executors import Executor, run_image_stage

# A phash follows its image bytes (named by image_sha256); older code replaced the whole row on a
# new image, so hashes made before the fingerprint existed are adopted, not redone.
PHASH_STAGE = ColumnStage(name="phash", columns=PHASH_COLUMNS, current={"phash_version": PHASH_VERSION}, inputs=("image_sha256",))


def hash_rows(sample_ids: list[str], images: list[bytes | None], _rows: pa.Table) -> pa.Table:
    rows = [phash_row(data) for data in images]
    return pa.table(
        {
            "sample_id": pa.array(sample_ids, pa.string()),
            "phash": pa.array([r["phash"] for r in rows], pa.int64()),
            "phash_degenerate": pa.array([r["phash_degenerate"] for r in rows], pa.bool_()),
            "phash_version": pa.array([r["phash_version"] for r in rows], pa.string()),
            "phash_error": pa.array([r["phash_error"] for r in rows], pa.string()),
        }
    )


def compute_phashes(
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
    """``task_resources``: custom Ray resources each hashing task asks for (PRX_RAY_TASK_RESOURCES)."""
    return run_image_stage(
        table_uri,
        PHASH_STAGE,
        hash_rows,
        error_column="phash_error",
        executor=executor,
        chunk_rows=chunk_rows,
        storage_options=storage_options,
        progress=progress,
        run_id=run_id,
        task_resources=task_resources,
        local_max_rows=local_max_rows,
    )
