"""Resumable column stages: results are appended to a staging table batch by batch, then merged
into the source table in one commit per run.

Why staging: committing each batch straight into a large fragment would rewrite that fragment's
column files every time (a 1M-row caption column, once per 1k captions). Appending a batch to a
staging table is a small new fragment; a killed run keeps every staged batch, and the next run
skips those rows (when they were made by the current model/version) and merges them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import lance
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.compat.lance_rows import take_by_address
from prx_data.core.filters import STATUS_OK, Expr, all_of, any_of, differs, equals
from prx_data.core.lance_io import ensure_columns, open_table, update_columns
from prx_data.core.locking import locks_table
from prx_data.core.storage import delete_tree, locate


@dataclass(frozen=True)
class ColumnStage:
    """What a stage writes and how to tell rows that are already current."""

    name: str  # e.g. "phash"; names the staging table
    columns: pa.Schema  # the columns it owns (without sample_id)
    # Column values that mark a row as done by the current code (e.g. {"phash_version": "v1"}).
    current: dict[str, str]
    # Rows eligible at all (e.g. status = 'ok'); others are never touched.
    eligible: Expr = field(default_factory=lambda: STATUS_OK)
    # Extra condition that also marks a row as needing work (e.g. caption_error IS NOT NULL).
    redo_also: Expr | None = None
    # Downstream columns made from this stage's output: nulled for every row this stage redoes
    # (a new caption invalidates its label).
    invalidates: tuple[str, ...] = ()

    def pending_filter(self) -> Expr:
        stale = [differs(col, val) for col, val in self.current.items()]
        if self.redo_also is not None:
            stale.append(self.redo_also)
        return all_of(self.eligible, any_of(*stale))

    def current_filter(self) -> Expr:
        """Rows whose stage columns were made by the current code."""
        return all_of(*(equals(c, v) for c, v in self.current.items()))


@dataclass
class StageStats:
    eligible: int = 0
    pending: int = 0
    processed: int = 0
    resumed: int = 0
    failed: int = 0
    seconds: float = 0.0
    version: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def skipped_current(self) -> int:
        return self.eligible - self.pending

    @property
    def rows_per_s(self) -> float:
        return self.processed / self.seconds if self.seconds else 0.0


def staging_uri(table_uri: str, stage: str) -> str:
    return f"{table_uri.rstrip('/').removesuffix('.lance')}.staging-{stage}.lance"


def _staged_current(uri: str, stage: ColumnStage, options: dict | None) -> lance.LanceDataset | None:
    staged = open_table(uri, options)
    if staged is None:
        return None
    if any(col not in staged.schema.names for col in stage.current):
        return None
    if any(name not in staged.schema.names for name in stage.columns.names):
        # Staged by a version of the stage with fewer columns: none of it is current, and new
        # batches could not be appended to it.
        _remove(uri, options)
        return None
    return staged


def pending_rows(ds: lance.LanceDataset, stage: ColumnStage, exclude: set[str]) -> pa.Table:
    """sample_id and row address of every row that needs work (no blobs are read)."""
    table = ds.to_table(columns=["sample_id"], filter=stage.pending_filter(), with_row_address=True)
    if exclude:
        table = table.filter(pc.invert(pc.is_in(table.column("sample_id"), value_set=pa.array(list(exclude)))))
    return table


# A processor receives the sample ids and row addresses of a chunk and yields result tables
# (sample_id + the stage's columns); it decides where the work runs.
Processor = Callable[[lance.LanceDataset, pa.Table], Iterable[pa.Table]]


@locks_table()
def run_column_stage(
    table_uri: str,
    stage: ColumnStage,
    processor: Processor,
    *,
    storage_options: dict | None = None,
    progress: Callable[[int, int], None] | None = None,
    error_column: str | None = None,
    run_id: str | None = None,
) -> StageStats:
    """``run_id`` (the orchestrator's run, e.g. Dagster's ``context.run_id``) is written to
    ``<stage name>_run_id`` on every row this run commits, so lineage names the run that made
    each value."""
    started = time.perf_counter()
    stats = StageStats()
    ds = open_table(table_uri, storage_options)
    if ds is None:
        raise FileNotFoundError(f"no Lance table at {table_uri}: materialize raw_samples first")
    ds = ensure_columns(ds, stage.columns)
    stats.eligible = ds.count_rows(filter=stage.eligible)

    staging = staging_uri(table_uri, stage.name)
    staged = _staged_current(staging, stage, storage_options)
    done: set[str] = set()
    if staged is not None:
        done = set(staged.to_table(columns=["sample_id"], filter=stage.current_filter()).column("sample_id").to_pylist())
    todo = pending_rows(ds, stage, done)
    stats.pending = todo.num_rows + len(done)
    stats.resumed = len(done)

    out_schema = pa.schema([pa.field("sample_id", pa.string()), *stage.columns])
    mode = "append" if staged is not None else "create"
    for result in processor(ds, todo):
        result = result.select(out_schema.names).cast(out_schema)
        lance.write_dataset(result, staging, mode=mode, storage_options=storage_options)
        mode = "append"
        stats.processed += result.num_rows
        if error_column:
            stats.failed += result.num_rows - result.column(error_column).null_count
        if progress:
            progress(stats.processed, todo.num_rows)

    final = open_table(staging, storage_options)
    if final is not None:
        results = final.to_table(filter=stage.current_filter())
        # Latest staged result per sample wins (a row re-done after a crash appears twice).
        results = _last_per_sample(results)
        for name in stage.invalidates:
            if name in ds.schema.names and name not in results.column_names:
                results = results.append_column(ds.schema.field(name), pa.nulls(results.num_rows, ds.schema.field(name).type))
        if run_id is not None:
            column = run_id_column(stage.name)
            ds = ensure_columns(ds, pa.schema([column]))
            results = results.append_column(column, pa.array([run_id] * results.num_rows, pa.string()))
        ds = update_columns(ds, results)
        _remove(staging, storage_options)
    stats.version = ds.version
    stats.seconds = time.perf_counter() - started
    return stats


def run_id_column(stage_name: str) -> pa.Field:
    """The column naming the run that wrote a stage's values, e.g. ``caption_run_id``."""
    return pa.field(f"{stage_name}_run_id", pa.string())


def _last_per_sample(table: pa.Table) -> pa.Table:
    if table.num_rows == 0:
        return table
    ids = table.column("sample_id").to_pylist()
    last = {sid: i for i, sid in enumerate(ids)}
    if len(last) == len(ids):
        return table
    return table.take(pa.array(sorted(last.values())))


def _remove(uri: str, storage_options: dict | None = None) -> None:
    # With the table's own endpoint and credentials: FileSystem.from_uri would go to AWS.

    delete_tree(locate(uri, storage_options))


def address_chunks(todo: pa.Table, size: int) -> Iterator[pa.Table]:
    for start in range(0, todo.num_rows, size):
        yield todo.slice(start, size)


def read_images(ds: lance.LanceDataset, addresses: list[int], column: str = "image") -> list[bytes | None]:
    """Image bytes for row addresses, in order."""
    pairs = ds.read_blobs(column, addresses=addresses, preserve_order=True)
    return [data for _, data in pairs]


def read_rows(ds: lance.LanceDataset, addresses: list[int], columns: list[str]) -> pa.Table:
    """Non-blob columns for row addresses, in order."""
    return take_by_address(ds, addresses, columns) if columns else pa.table({})


__all__ = [
    "ColumnStage",
    "StageStats",
    "address_chunks",
    "pending_rows",
    "read_images",
    "read_rows",
    "run_column_stage",
    "run_id_column",
    "staging_uri",
]
