"""Where a row stage's work runs: in this process, or as Ray tasks (one chunk of rows each).

Workers open the table at the driver's version and read their own images by row address, so
only addresses cross the wire to the worker and only small result tables come back.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Literal

import lance
import pyarrow as pa

from prx_data.core.lance_io import storage_options_of
from prx_data.core.ray_tasks import LOCAL_MAX_ROWS, Executor, bounded, ensure_ray, task_options
from prx_data.stages.column_stage import (
    Chunked,
    ColumnStage,
    Processor,
    StageStats,
    address_chunks,
    read_images,
    read_rows,
    run_column_stage,
)

__all__ = ["Executor", "make_processor", "resolve_executor"]


def resolve_executor(
    executor: Executor, rows: int, task_resources: dict[str, float] | None = None, local_max_rows: int | None = None
) -> Literal["ray", "local"]:
    """Where ``rows`` rows of work run. Work pinned to nodes (``task_resources``) always goes to
    Ray: the pin says this process's node must not do it."""
    if executor != "auto":
        return executor
    limit = LOCAL_MAX_ROWS if local_max_rows is None else local_max_rows
    return "local" if rows <= limit and not task_resources else "ray"


# fn(sample_ids, images, rows) -> table with sample_id + the stage's columns. Must be picklable
# (a module-level function or a functools.partial of one) to run on Ray.
RowFn = Callable[[list[str], list[bytes | None], pa.Table], pa.Table]


def _run_chunk(uri: str, version: int, options: dict | None, chunk: pa.Table, fn: RowFn, columns: list[str], with_images: bool) -> pa.Table:
    addresses = chunk.column("_rowaddr").to_pylist()
    if not columns and not with_images:  # nothing to read (a stage that needs no model)
        return fn(chunk.column("sample_id").to_pylist(), [None] * len(addresses), pa.table({}))
    ds = lance.dataset(uri, version=version, storage_options=options)
    images: list[bytes | None] = read_images(ds, addresses) if with_images else [None] * len(addresses)
    rows = read_rows(ds, addresses, columns)
    return fn(chunk.column("sample_id").to_pylist(), images, rows)


def make_processor(
    fn: RowFn,
    *,
    columns: Sequence[str] = (),
    with_images: bool = True,
    executor: Executor = "ray",
    chunk_rows: int = 256,
    num_cpus: float = 1,
    max_in_flight: int | None = None,
    task_resources: dict[str, float] | None = None,
    local_max_rows: int | None = None,
) -> Processor:
    """``task_resources``: custom Ray resources each chunk task asks for, so the work runs only
    on nodes that offer them (PRX_RAY_TASK_RESOURCES). ``local_max_rows``: the "auto" executor's
    threshold (None: ``LOCAL_MAX_ROWS``)."""
    options_of_task = task_options(num_cpus=num_cpus, max_retries=2, resources=task_resources)  # checked before any work
    column_names = list(columns)

    def local(ds: lance.LanceDataset, todo: pa.Table | Chunked) -> Iterator[pa.Table]:
        options = storage_options_of(ds)
        for chunk in address_chunks(todo, chunk_rows):
            yield _run_chunk(ds.uri, ds.version, options, chunk, fn, column_names, with_images)

    def on_ray(ds: lance.LanceDataset, todo: pa.Table | Chunked) -> Iterator[pa.Table]:
        ray = ensure_ray()
        remote = ray.remote(**options_of_task)(_run_chunk)
        options = storage_options_of(ds)
        fn_ref = ray.put(fn)
        limit = max_in_flight or max(2, int(ray.available_resources().get("CPU", 1) / num_cpus) * 2)
        submit = lambda chunk: remote.remote(ds.uri, ds.version, options, chunk, fn_ref, column_names, with_images)  # noqa: E731
        yield from bounded(ray, submit, address_chunks(todo, chunk_rows), limit)

    def auto(ds: lance.LanceDataset, todo: pa.Table | Chunked) -> Iterator[pa.Table]:
        where = resolve_executor("auto", todo.num_rows, task_resources, local_max_rows)
        yield from (on_ray if where == "ray" else local)(ds, todo)

    return {"ray": on_ray, "local": local, "auto": auto}[executor]


def run_image_stage(
    table_uri: str,
    stage: ColumnStage,
    rows_fn: Callable,
    *,
    error_column: str,
    executor: Executor = "ray",
    chunk_rows: int = 256,
    storage_options: dict | None = None,
    progress=None,
    run_id: str | None = None,
    task_resources: dict[str, float] | None = None,
    local_max_rows: int | None = None,
) -> StageStats:
    """``rows_fn`` over the images of the rows ``stage`` finds stale, as Ray tasks or locally
    (``make_processor``), written back by ``run_column_stage``. ``task_resources``: the custom Ray
    resources each task asks for (PRX_RAY_TASK_RESOURCES)."""
    processor = make_processor(
        rows_fn, executor=executor, chunk_rows=chunk_rows, task_resources=task_resources, local_max_rows=local_max_rows
    )
    return run_column_stage(
        table_uri, stage, processor, storage_options=storage_options, progress=progress, run_id=run_id, error_column=error_column
    )
