"""Resumable column stages: results are appended to a staging table batch by batch, then merged
into the source table in one commit per run.

Why staging: committing each batch straight into a large fragment would rewrite that fragment's
column files every time (a 1M-row caption column, once per 1k captions). Appending a batch to a
staging table is a small new fragment; a killed run keeps every staged batch, and the next run
skips those rows (when they were made by the current model/version) and merges them.

Inputs: a stage that names its ``inputs`` stores ``<name>_input_fp``, a fingerprint of the input
values each row's result was made from. A row whose inputs no longer match it is redone (an
edited source caption re-captions its row, a new caption re-labels it), exactly those rows.
Rows made before the column existed (null fingerprint) follow ``upgrade``: ``adopt`` records the
fingerprint of their present inputs without redoing them (right when the older code already
redid the row on every change of these inputs: image-derived values, since a new image replaces
the whole row; labels, which a re-caption nulled), ``redo`` redoes them once (the ``source``
captioner, whose captions older code left stale after a metadata edit, and costs nothing).

The rows to do are planned into local spill files (``stages.pending_plan``), and a run past
``RANGE_ROWS`` of them works one sample-id range at a time: what it holds is bounded by a
range, not by the source.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, Protocol

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.compat.lance_rows import take_by_address
from prx_data.core.lance_io import ensure_columns, fragment_of, open_table, update_fragments
from prx_data.core.locking import locks_table
from prx_data.core.paths import staging_uri
from prx_data.core.spill import PartitionFiles, key_runs
from prx_data.core.storage import delete_tree, locate
from prx_data.stages.column_spec import FINGERPRINT, ColumnStage, input_fingerprints
from prx_data.stages.pending_plan import RANGE_ROWS, PendingPlan, RangeLookup, plan_pending


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


def _staged_current(uri: str, stage: ColumnStage, options: dict | None) -> lance.LanceDataset | None:
    staged = open_table(uri, options)
    if staged is None:
        return None
    if any(col not in staged.schema.names for col in stage.current):
        return None
    if any(name not in staged.schema.names for name in stage.stored_columns.names):
        # Staged by a version of the stage with fewer columns: none of it is current, and new
        # batches could not be appended to it.
        _remove(uri, options)
        return None
    return staged


# A processor receives the sample ids and row addresses of a chunk and yields result tables
# (sample_id + the stage's columns); it decides where the work runs.
class Chunked(Protocol):
    """Rows to do that read themselves back in slices (``core.spill.ScanOrdered``)."""

    @property
    def num_rows(self) -> int: ...

    def chunks(self, size: int) -> Iterator[pa.Table]: ...


Processor = Callable[[lance.LanceDataset, pa.Table | Chunked], Iterable[pa.Table]]


# Results are staged (what a killed run keeps) at most this many seconds apart, or this many rows:
# one Lance append per 256-row chunk made a staging table of thousands of fragments at scale, each
# append slower than the last (source captions of 20,000 rows: 2.7 s with an append per chunk,
# 0.9 s batched; benchmarks/bench_growth.py, the captions row).
STAGING_FLUSH_S = 5.0
STAGING_FLUSH_ROWS = 65_536
COMMIT_BATCH_ROWS = 65_536


class _StagingWriter:
    """Appends results to the staging table: the first at once (a run killed early keeps it),
    then batched by :data:`STAGING_FLUSH_S` and :data:`STAGING_FLUSH_ROWS`."""

    def __init__(self, uri: str, mode: Literal["create", "append"], storage_options: dict | None) -> None:
        self.uri, self.mode, self.storage_options = uri, mode, storage_options
        self.buffered: list[pa.Table] = []
        self.rows = 0
        self.last_flush: float | None = None

    def add(self, result: pa.Table) -> None:
        self.buffered.append(result)
        self.rows += result.num_rows
        if self.last_flush is None or self.rows >= STAGING_FLUSH_ROWS or time.monotonic() - self.last_flush >= STAGING_FLUSH_S:
            self.flush()

    def flush(self) -> None:
        if self.buffered:
            lance.write_dataset(pa.concat_tables(self.buffered), self.uri, mode=self.mode, storage_options=self.storage_options)
            self.mode = "append"
            self.buffered, self.rows = [], 0
        self.last_flush = time.monotonic()


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
    range_rows: int = RANGE_ROWS,
) -> StageStats:
    """``run_id`` (the orchestrator's run, e.g. Dagster's ``context.run_id``) is written to
    ``<stage name>_run_id`` on every row this run commits, so lineage names the run that made
    each value. ``range_rows``: past this many rows to do, the run plans, processes and commits
    them one sample-id range at a time (``stages.pending_plan``); the processor is called once
    per range."""
    started = time.perf_counter()
    stats = StageStats()
    ds = open_table(table_uri, storage_options)
    if ds is None:
        raise FileNotFoundError(f"no Lance table at {table_uri}: materialize raw_samples first")
    ds = ensure_columns(ds, stage.stored_columns)
    stats.eligible = ds.count_rows(filter=stage.eligible)

    staging = staging_uri(table_uri, stage.name)
    staged = _staged_current(staging, stage, storage_options)
    fp_col = stage.fingerprint_column
    with tempfile.TemporaryDirectory(prefix=f"prx-pending-{stage.name}-") as folder:
        plan = plan_pending(ds, stage, folder, range_rows)
        if staged is not None:
            plan.resume(staged, COMMIT_BATCH_ROWS)
        to_do = plan.todo_rows - plan.resumed
        stats.pending, stats.resumed = plan.todo_rows, plan.resumed
        stats.extra["inputs_changed"] = plan.changed
        if plan.ranges > 1:
            stats.extra["pending_ranges"] = plan.ranges
        lookup = plan.lookup()

        out_schema = pa.schema([pa.field("sample_id", pa.string()), *stage.stored_columns])
        staged_now = _StagingWriter(staging, "append" if staged is not None else "create", storage_options)
        try:
            for part in range(plan.ranges):
                todo = plan.remaining(part)
                if not todo.num_rows:
                    continue
                for result in processor(ds, todo):
                    if fp_col is not None:
                        fps = lookup.get(result.column("sample_id"), FINGERPRINT)
                        if fp_col in result.column_names:
                            result = result.drop_columns([fp_col])
                        result = result.append_column(pa.field(fp_col, pa.string()), fps)
                    for name, columns in stage.output_fingerprints.items():
                        if name in result.column_names:
                            result = result.drop_columns([name])
                        result = result.append_column(
                            pa.field(name, pa.string()), pa.array(input_fingerprints(result, columns), pa.string())
                        )
                    result = result.select(out_schema.names).cast(out_schema)
                    staged_now.add(result)
                    stats.processed += result.num_rows
                    if error_column:
                        stats.failed += result.num_rows - result.column(error_column).null_count
                    if progress:
                        progress(stats.processed, to_do)
        except BaseException:
            # A later chunk failed or the run was stopped: keep what is done for the next run.
            with contextlib.suppress(Exception):
                staged_now.flush()
            raise
        staged_now.flush()

        final = open_table(staging, storage_options)
        if final is not None:
            if run_id is not None:
                ds = ensure_columns(ds, pa.schema([run_id_column(stage.name)]))
            ds = _commit_staged(ds, stage, final, lookup, run_id, folder)
            _remove(staging, storage_options)
        if plan.adopt_rows and fp_col is not None:
            # Made before fingerprints existed: record what they were made from, redo nothing.
            ds = _adopt(ds, plan, fp_col, range_rows)
            stats.extra["fingerprints_adopted"] = plan.adopt_rows
    stats.version = ds.version
    stats.seconds = time.perf_counter() - started
    return stats


def _adopt(ds: lance.LanceDataset, plan: PendingPlan, fp_col: str, range_rows: int) -> lance.LanceDataset:
    """One commit per ``range_rows`` rows to adopt; row addresses stay valid across these
    column-only updates (a fragment keeps its id)."""
    for rows in plan.adopt_slices(range_rows):
        frags = fragment_of(rows.column("_rowaddr")).cast(pa.int64()).to_numpy(zero_copy_only=False)
        order, runs = key_runs(frags)
        updates = rows.select(["sample_id", FINGERPRINT]).rename_columns(["sample_id", fp_col]).take(pa.array(order))
        ds = update_fragments(ds, ((frag, updates.slice(start, end - start)) for frag, start, end in runs))
    return ds


def _commit_staged(
    ds: lance.LanceDataset, stage: ColumnStage, final: lance.LanceDataset, lookup: RangeLookup, run_id: str | None, folder: str
):
    """The current staged results of the rows to do, written into their fragments with one commit.

    One pass over the staging table spills the results by fragment to local disk; then one
    fragment's results at a time are in memory (at most ``rows_per_fragment`` rows' values, never
    the source's: the captions of a 50M-row source are tens of GB)."""
    fp_col = stage.fingerprint_column
    spill = PartitionFiles(os.path.join(folder, "commit"))
    for batch in final.to_batches(filter=stage.current_filter(), batch_size=COMMIT_BATCH_ROWS):
        ids = batch.column("sample_id")
        # Not a row to do any more (committed by a run killed before it removed its staging),
        # or staged by a killed run from inputs that have changed since: redone, or gone.
        keep = lookup.current_made(ids, batch.column(fp_col) if fp_col else None)
        frags = fragment_of(lookup.get(ids.filter(keep), "_rowaddr")).cast(pa.int64()).to_numpy(zero_copy_only=False)
        spill.split(pa.Table.from_batches([batch]).filter(keep), frags)

    def results_by_fragment() -> Iterator[tuple[int, pa.Table]]:
        for frag_id in spill.close():
            # Latest staged result per sample wins (a row re-done after a crash appears twice).
            results = _invalidate(ds.get_fragment(frag_id), ds.schema, stage, _last_per_sample(spill.read(frag_id)))
            if run_id is not None:
                results = results.append_column(run_id_column(stage.name), pa.repeat(pa.scalar(run_id, pa.string()), results.num_rows))
            yield frag_id, results

    return update_fragments(ds, results_by_fragment())


def _invalidate(fragment, schema: pa.Schema, stage: ColumnStage, results: pa.Table) -> pa.Table:
    """Null the downstream columns of every row whose value this run changed; a row redone to the
    same value (a re-run after an upgrade, a caption edited back) keeps its downstream values.
    ``fragment``: the Lance fragment holding every row of ``results`` (unique sample ids)."""
    downstream = [n for n in stage.invalidates if n in schema.names and n not in results.column_names]
    if not downstream or results.num_rows == 0:
        return results
    values = stage.columns.names
    stored = fragment.to_table(columns=["sample_id", *values, *downstream], filter=pc.field("sample_id").isin(results.column("sample_id")))
    stored = stored.rename_columns(["sample_id", *(f"_stored_{v}" for v in values), *downstream])
    stored = stored.append_column("_stored", pa.repeat(pa.scalar(True), stored.num_rows))
    made = results.select(["sample_id", *values]).append_column("_row", pa.array(np.arange(results.num_rows)))
    # Arrow's join does not keep row order: restore the results' own.
    joined = made.join(stored, "sample_id", join_type="left outer").sort_by("_row")
    same = pc.is_valid(joined.column("_stored"))
    for v in values:
        new, old = joined.column(v), joined.column(f"_stored_{v}")
        equal = pc.or_(pc.fill_null(pc.equal(new, old), False), pc.and_(pc.is_null(new), pc.is_null(old)))
        same = pc.and_(same, equal)
    for name in downstream:
        field_ = schema.field(name)
        kept = pc.if_else(same, joined.column(name).cast(field_.type), pa.scalar(None, field_.type))
        results = results.append_column(field_, kept)
    return results


def run_id_column(stage_name: str) -> pa.Field:
    """The column naming the run that wrote a stage's values, e.g. ``caption_run_id``."""
    return pa.field(f"{stage_name}_run_id", pa.string())


def _last_per_sample(table: pa.Table) -> pa.Table:
    if table.num_rows == 0 or pc.count_distinct(table.column("sample_id")).as_py() == table.num_rows:
        return table
    rows = table.select(["sample_id"]).append_column("_row", pa.array(np.arange(table.num_rows)))
    last = rows.group_by("sample_id", use_threads=False).aggregate([("_row", "max")]).column("_row_max")
    return table.take(np.sort(last.to_numpy()))


def _remove(uri: str, storage_options: dict | None = None) -> None:
    # With the table's own endpoint and credentials: FileSystem.from_uri would go to AWS.

    delete_tree(locate(uri, storage_options))


def pending_rows(ds: lance.LanceDataset, stage: ColumnStage, exclude: Iterable[str] = ()) -> pa.Table:
    """``sample_id`` and row address of every row to do but those in ``exclude``, read whole:
    for inspecting a small table (a run plans them range by range)."""
    with tempfile.TemporaryDirectory(prefix=f"prx-pending-{stage.name}-") as folder:
        plan = plan_pending(ds, stage, folder)
        rows = pa.concat_tables([plan.todo(part) for part in range(plan.ranges)]).select(["sample_id", "_rowaddr"])
    skip = pa.array(sorted(set(exclude)), pa.string())
    return rows.filter(pc.invert(pc.is_in(rows.column("sample_id"), value_set=skip))) if len(skip) else rows


def address_chunks(todo: pa.Table | Chunked, size: int) -> Iterator[pa.Table]:
    """Slices of at most ``size`` rows of the rows to do: a table, or rows spilled to disk that
    read themselves back in order (``core.spill.ScanOrdered``)."""
    if not isinstance(todo, pa.Table):
        yield from todo.chunks(size)
        return
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
    "input_fingerprints",
    "pending_rows",
    "read_images",
    "read_rows",
    "run_column_stage",
    "run_id_column",
    "staging_uri",
]
