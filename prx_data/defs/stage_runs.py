"""What every row-stage asset (phashes, captions, caption_labels) hands its stage: the run's
executor and chunking, the storage options, progress lines in the run log, the run id written
to each row, and where the stage's Ray tasks may run."""

import dagster as dg

from prx_data.core.ray_tasks import Executor
from prx_data.defs.progress import ProgressLogger
from prx_data.defs.resources import RayTasksResource, StorageResource


def stage_run(
    context: dg.AssetExecutionContext, storage: StorageResource, ray_tasks: RayTasksResource, executor: Executor, chunk_rows: int, done: str
) -> dict:
    """Keyword arguments of ``compute_*(table_uri, ...)``; ``done``: the progress lines' verb."""
    return {
        "executor": executor,
        "chunk_rows": chunk_rows,
        "storage_options": storage.options,
        "progress": ProgressLogger(context.log, done),
        "run_id": context.run_id,
        "task_resources": ray_tasks.resources,
        "local_max_rows": ray_tasks.local_max_rows,
    }
