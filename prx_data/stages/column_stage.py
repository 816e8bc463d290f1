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
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
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
from prx_data.core.filters import STATUS_OK, Expr, all_of, any_of, differs, equals
from prx_data.core.lance_io import ensure_columns, fragment_of, open_table, update_columns, update_fragments
from prx_data.core.locking import locks_table
from prx_data.core.schema import input_fingerprint_field
from prx_data.core.sorted_keys import SortedKeys
from prx_data.core.spill import PartitionFiles
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
    # Columns each value is made from (e.g. ("image_sha256", "source_caption")); their fingerprint
    # is kept in ``fingerprint_column`` and a row whose inputs changed is redone.
    inputs: tuple[str, ...] = ()
    # What rows made before fingerprints existed get (see the module docstring).
    upgrade: Literal["adopt", "redo"] = "adopt"
    # Fingerprints of other stages made from this stage's own output, computed from the result
    # (a fused caption request writes the label too: {"label_input_fp": ("caption",)}).
    output_fingerprints: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def fingerprint_column(self) -> str | None:
        return input_fingerprint_field(self.name).name if self.inputs else None

    @property
    def stored_columns(self) -> pa.Schema:
        """What the stage writes into the table: its columns and, with inputs, their fingerprint."""
        extra = [pa.field(name, pa.string()) for name in self.output_fingerprints]
        own = [input_fingerprint_field(self.name)] if self.inputs else []
        return pa.schema([*self.columns, *own, *extra])

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
    if any(name not in staged.schema.names for name in stage.stored_columns.names):
        # Staged by a version of the stage with fewer columns: none of it is current, and new
        # batches could not be appended to it.
        _remove(uri, options)
        return None
    return staged


def input_fingerprints(table: pa.Table | pa.RecordBatch, inputs: tuple[str, ...]) -> list[str]:
    """One fingerprint per row of the ``inputs`` values (null and "" differ; order matters)."""
    # An input the table lacks counts as null (a table made before that column existed).
    names = table.schema.names
    columns = [table.column(name).to_pylist() if name in names else [None] * table.num_rows for name in inputs]
    # Each value tagged (\x00 null, \x01 + text) and separated by \x1e: unambiguous, and about
    # cheaper than json.dumps per row (this runs over every eligible row on every run).
    blake = hashlib.blake2b
    return [
        blake(
            "\x1e".join("\x00" if v is None else "\x01" + str(v) for v in values).encode("utf-8", "surrogateescape"), digest_size=16
        ).hexdigest()
        for values in zip(*columns)
    ]


@dataclass
class Pending:
    """What a run must do: ``todo`` (sample_id + row address, in table order) to compute,
    ``adopt`` (sample_id + fingerprint) rows made before fingerprints existed that only get theirs
    recorded, and ``fingerprints``: the current input fingerprint of each row to do, aligned with
    ``todo`` (None for a stage without inputs). All Arrow: a first run holds the whole source's
    rows to do, at their Arrow size (about 80 B a row), never a Python object per row."""

    todo: pa.Table
    adopt: pa.Table | None = None
    fingerprints: pa.Array | None = None
    changed: int = 0  # rows redone because their inputs changed

    @functools.cached_property
    def index(self) -> SortedKeys:
        """The rows to do by sample_id: their row address and, with inputs, their fingerprint."""
        table = self.todo.select(["sample_id", "_rowaddr"])
        if self.fingerprints is not None:
            table = table.append_column(FINGERPRINT, self.fingerprints)
        return SortedKeys(table)

    def current_made(self, ids: pa.Array | pa.ChunkedArray, made_from: pa.Array | pa.ChunkedArray | None) -> pa.Array:
        """Which results (``ids``, made from inputs ``made_from``; None for a stage without
        inputs) are for a row to do, made from the inputs it holds now."""
        if made_from is None:
            return self.index.contains(ids)
        return pc.fill_null(pc.equal(self.index.get(ids, FINGERPRINT), made_from), False)


# The fingerprint column of :attr:`Pending.index` (the stage's own name is not needed there).
FINGERPRINT = "fingerprint"


def _by_id(ids: pa.Array | pa.ChunkedArray, exclude: set[str] | pa.Array) -> pa.Array:
    """False for the ids in ``exclude``."""
    value_set = exclude if isinstance(exclude, pa.Array) else pa.array(sorted(exclude), pa.string())
    return pc.invert(pc.is_in(ids, value_set=value_set))


def pending_rows(ds: lance.LanceDataset, stage: ColumnStage, exclude: set[str]) -> pa.Table:
    """sample_id and row address of every row that needs work (no blobs are read)."""
    return find_pending(ds, stage, exclude).todo


def find_pending(ds: lance.LanceDataset, stage: ColumnStage, exclude: set[str] | None = None) -> Pending:
    """Rows stale by model/version/error, and (for a stage with inputs) rows whose inputs changed.

    Only ``sample_id``, the input columns and the stored fingerprint are read, batch by batch;
    each batch is decided with Arrow masks."""
    exclude = exclude or set()
    stale = ds.to_table(columns=["sample_id"], filter=stage.pending_filter(), with_row_address=True)
    fp_col = stage.fingerprint_column
    if fp_col is None:
        return Pending(stale.filter(_by_id(stale.column("sample_id"), exclude)) if exclude else stale)
    stale_keys = SortedKeys(stale.select(["sample_id"]))
    del stale
    todo, adopt = [], []
    changed = 0
    present = [c for c in stage.inputs if c in ds.schema.names]
    has_fp = fp_col in ds.schema.names  # not yet on a table the stage never ran on
    scanner = ds.scanner(columns=["sample_id", *present, *([fp_col] if has_fp else [])], filter=stage.eligible, with_row_address=True)
    for batch in scanner.to_batches():
        ids = batch.column("sample_id")
        now = pa.array(input_fingerprints(batch, stage.inputs), pa.string())
        stored = batch.column(fp_col) if has_fp else pa.nulls(batch.num_rows, pa.string())
        is_stale = stale_keys.contains(ids)
        unmarked = pc.and_(pc.invert(is_stale), pc.is_null(stored))  # made before fingerprints
        edited = pc.and_(pc.invert(is_stale), pc.fill_null(pc.not_equal(stored, now), False))
        changed += pc.sum(edited.cast(pa.int64())).as_py() or 0
        redo = pc.or_(is_stale, edited)
        if stage.upgrade == "redo":
            redo = pc.or_(redo, unmarked)
        else:
            adopt.append(pa.table({"sample_id": ids, fp_col: now}).filter(unmarked))
        if exclude:
            redo = pc.and_(redo, _by_id(ids, exclude))
        todo.append(pa.table({"sample_id": ids, "_rowaddr": batch.column("_rowaddr"), FINGERPRINT: now}).filter(redo))
    todo_schema = pa.schema([("sample_id", pa.string()), ("_rowaddr", pa.uint64()), (FINGERPRINT, pa.string())])
    rows = pa.concat_tables([t.cast(todo_schema) for t in todo]).combine_chunks() if todo else todo_schema.empty_table()
    adopted = pa.concat_tables(adopt) if adopt else pa.schema([("sample_id", pa.string()), (fp_col, pa.string())]).empty_table()
    return Pending(rows.select(["sample_id", "_rowaddr"]), adopted, rows.column(FINGERPRINT).combine_chunks(), changed)


# A processor receives the sample ids and row addresses of a chunk and yields result tables
# (sample_id + the stage's columns); it decides where the work runs.
class Chunked(Protocol):
    """Rows to do that read themselves back in slices (``export_spill.ScanOrdered``)."""

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
) -> StageStats:
    """``run_id`` (the orchestrator's run, e.g. Dagster's ``context.run_id``) is written to
    ``<stage name>_run_id`` on every row this run commits, so lineage names the run that made
    each value."""
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
    pending = find_pending(ds, stage)
    done = pa.array([], pa.string())
    if staged is not None:
        kept = staged.to_table(columns=["sample_id", *([fp_col] if fp_col else [])], filter=stage.current_filter())
        # A staged result counts only if it is for a row to do, made from the inputs it holds now.
        ids = kept.column("sample_id")
        done = pc.unique(ids.filter(pending.current_made(ids, kept.column(fp_col) if fp_col else None))).cast(pa.string())
        del kept
    todo = pending.todo.filter(_by_id(pending.todo.column("sample_id"), done)) if len(done) else pending.todo
    stats.pending = todo.num_rows + len(done)
    stats.resumed = len(done)
    stats.extra["inputs_changed"] = pending.changed

    out_schema = pa.schema([pa.field("sample_id", pa.string()), *stage.stored_columns])
    staged_now = _StagingWriter(staging, "append" if staged is not None else "create", storage_options)
    try:
        for result in processor(ds, todo):
            if fp_col is not None:
                fps = pending.index.get(result.column("sample_id"), FINGERPRINT)
                if fp_col in result.column_names:
                    result = result.drop_columns([fp_col])
                result = result.append_column(pa.field(fp_col, pa.string()), fps)
            for name, columns in stage.output_fingerprints.items():
                if name in result.column_names:
                    result = result.drop_columns([name])
                result = result.append_column(pa.field(name, pa.string()), pa.array(input_fingerprints(result, columns), pa.string()))
            result = result.select(out_schema.names).cast(out_schema)
            staged_now.add(result)
            stats.processed += result.num_rows
            if error_column:
                stats.failed += result.num_rows - result.column(error_column).null_count
            if progress:
                progress(stats.processed, todo.num_rows)
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
        ds = _commit_staged(ds, stage, final, pending, run_id)
        _remove(staging, storage_options)
    if pending.adopt is not None and pending.adopt.num_rows:
        # Made before fingerprints existed: record what they were made from, redo nothing.
        ds = update_columns(ds, pending.adopt)
        stats.extra["fingerprints_adopted"] = pending.adopt.num_rows
    stats.version = ds.version
    stats.seconds = time.perf_counter() - started
    return stats


def _commit_staged(ds: lance.LanceDataset, stage: ColumnStage, final: lance.LanceDataset, pending: Pending, run_id: str | None):
    """The current staged results of the rows to do, written into their fragments with one commit.

    One pass over the staging table spills the results by fragment to local disk; then one
    fragment's results at a time are in memory (at most ``rows_per_fragment`` rows' values, never
    the source's: the captions of a 50M-row source are tens of GB)."""
    fp_col = stage.fingerprint_column
    with tempfile.TemporaryDirectory(prefix=f"prx-commit-{stage.name}-") as folder:
        spill = PartitionFiles(folder)
        for batch in final.to_batches(filter=stage.current_filter(), batch_size=COMMIT_BATCH_ROWS):
            ids = batch.column("sample_id")
            # Not a row to do any more (committed by a run killed before it removed its staging),
            # or staged by a killed run from inputs that have changed since: redone, or gone.
            keep = pending.current_made(ids, batch.column(fp_col) if fp_col else None)
            frags = fragment_of(pending.index.get(ids.filter(keep), "_rowaddr")).cast(pa.int64()).to_numpy(zero_copy_only=False)
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


def address_chunks(todo: pa.Table | Chunked, size: int) -> Iterator[pa.Table]:
    """Slices of at most ``size`` rows of the rows to do: a table, or rows spilled to disk that
    read themselves back in order (``export_spill.ScanOrdered``)."""
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
    "Pending",
    "StageStats",
    "address_chunks",
    "find_pending",
    "input_fingerprints",
    "pending_rows",
    "read_images",
    "read_rows",
    "run_column_stage",
    "run_id_column",
    "staging_uri",
]
