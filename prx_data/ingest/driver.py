"""Ingest one source into its Lance table in the common schema.

Streaming end to end (reader -> download -> probe -> record batches -> Lance), so memory stays
flat as a source grows. Re-running is idempotent and incremental:

- rows whose image and metadata did not change are left alone (URLs already fetched are not
  fetched again);
- rows whose image changed (bytes, or status) are replaced whole, so derived columns are
  redone;
- rows whose metadata alone changed (caption, licence, URL, embedding: every mapped field,
  sidecars added, edited or removed) get those columns updated in place; their phash and other
  image-derived columns stay, and no image work is redone;
- rows that left the source are deleted, except when this run could not read a whole file (an
  unreadable Parquet file, a corrupt tar) or found nothing at all where rows existed: a
  vanished mount must not delete a source (``allow_empty: true`` accepts an empty source).

Scale-out: the driver lists the source's input units (``plan/unit_listing.py``); each unit is
read, probed and compared by a task (``unit_tasks.py``: in this process for ``workers: 1``, Ray
tasks for more) that writes its new and changed rows as uncommitted Lance fragments. The driver
finds duplicate and removed ids with Arrow joins over partitioned id lists
(``plan/seen_ids.py``) and commits everything at once: a killed run leaves the last version.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from datetime import UTC, datetime

import lance
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.compat.lance_rows import delete_in_fragment
from prx_data.core.lance_io import ensure_columns, open_table, storage_options_of
from prx_data.core.locking import locks_table
from prx_data.core.paths import unit_manifest_uri
from prx_data.core.ray_tasks import LOCAL_MAX_ROWS, prefetch_ray
from prx_data.core.schema import PHASH_COLUMNS, raw_schema
from prx_data.core.urls import key_uri_for_table, load_url_key
from prx_data.ingest.ownership import record_owner
from prx_data.ingest.plan.seen_ids import REPLACED_SCHEMA, SEEN_SCHEMA, SeenIds
from prx_data.ingest.plan.unit_listing import list_units
from prx_data.ingest.plan.unit_manifest import PIECES, ChangePlan, Kept, KeptObjects, ManifestRows, kept_seen, load_plan, run_fingerprint
from prx_data.ingest.read.object_store import source_storage_options as source_storage_options_of
from prx_data.ingest.read.raw_item import SourceUnavailable
from prx_data.ingest.read.units import Unit
from prx_data.ingest.registry import RegisteredSource
from prx_data.ingest.rows.ingest_stats import IngestStats, empty_field_warnings
from prx_data.ingest.rows.raw_row import OptOutMatcher, metadata_schema
from prx_data.ingest.unit_tasks import UnitJob, UnitResult, run_units


class EmptySource(SourceUnavailable):
    """The source matched nothing where rows existed; the last good table is kept."""


def _target_schema(source: RegisteredSource, ds: lance.LanceDataset | None) -> pa.Schema:
    schema = raw_schema(source.spec.embedding_dim)
    if ds is None:
        return schema
    # Changed rows carry the derived columns as nulls, so later stages redo them.
    extra = [f for f in ds.schema if f.name not in schema.names]
    return pa.schema(list(schema) + extra)


class _Spill:
    """Metadata-only updates, spilled to a local Arrow file so memory stays flat however many.

    Each row is tagged with its unit and attempt: a unit redone (it held a duplicate key) keeps
    only its last attempt's rows."""

    def __init__(self, schema: pa.Schema) -> None:
        import tempfile

        self.schema = schema
        self.tagged = pa.schema([*schema, pa.field("_unit", pa.int64()), pa.field("_attempt", pa.int64())])
        self._dir = tempfile.TemporaryDirectory(prefix="prx-ingest-")
        self.path = f"{self._dir.name}/metadata.arrow"
        self._writer: pa.RecordBatchFileWriter | None = None  # opened by the first add
        self.rows = 0

    def add(self, table: pa.Table, unit: int, attempt: int) -> None:
        import pyarrow.ipc as ipc

        if self._writer is None:
            self._writer = ipc.new_file(self.path, self.tagged)
        n = table.num_rows
        table = table.append_column("_unit", pa.array([unit] * n, pa.int64())).append_column(
            "_attempt", pa.array([attempt] * n, pa.int64())
        )
        self._writer.write_table(table.cast(self.tagged))
        self.rows += n

    def reader(self, superseded: set[tuple[int, int]]) -> pa.RecordBatchReader:
        import pyarrow.ipc as ipc

        if self._writer is None:
            raise RuntimeError("no rows were spilled: check .rows before reading them back")
        self._writer.close()
        file = ipc.open_file(pa.memory_map(self.path))

        def batches():
            for i in range(file.num_record_batches):
                batch = file.get_batch(i)
                if superseded:
                    stale = pa.array(
                        [(u, a) in superseded for u, a in zip(batch.column("_unit").to_pylist(), batch.column("_attempt").to_pylist())]
                    )
                    batch = batch.filter(pc.invert(stale))
                if batch.num_rows:
                    yield pa.RecordBatch.from_arrays(batch.columns[: len(self.schema)], schema=self.schema)

        return pa.RecordBatchReader.from_batches(self.schema, batches())

    def close(self) -> None:
        self._dir.cleanup()


def _has_id_index(ds: lance.LanceDataset) -> bool:
    return any("sample_id" in (idx.get("fields") or []) for idx in ds.list_indices())


def _index_ids(ds: lance.LanceDataset, *, refresh: bool) -> lance.LanceDataset:
    """A BTREE index on ``sample_id``: each chunk's lookup of its stored rows (and merge_insert)
    reads a few index pages instead of the whole id column. Made once; ``refresh`` (after a run
    that wrote) covers the new fragments. A run that changed nothing leaves the version alone."""
    if ds.count_rows() == 0:
        return ds
    if not _has_id_index(ds):
        ds.create_scalar_index("sample_id", "BTREE", replace=False)
    elif refresh:
        ds.optimize.optimize_indices()
    else:
        return ds
    return lance.dataset(ds.uri, storage_options=storage_options_of(ds))


@locks_table("uri")
def ingest_source(
    source: RegisteredSource,
    uri: str,
    *,
    rows_per_fragment: int = 1_000_000,
    storage_options: dict | None = None,
    optout: OptOutMatcher | None = None,
    run_id: str | None = None,
    workers: int | None = None,
    spill_rows: int | None = None,
    source_storage_options: dict | None = None,
    task_resources: dict[str, float] | None = None,
    reread_unchanged: bool = False,
    local_max_rows: int = LOCAL_MAX_ROWS,
) -> IngestStats:
    """``run_id`` (e.g. Dagster's ``context.run_id``) goes to ``ingest_run_id`` on every row this
    run writes, so lineage names the run that made each row. ``workers`` overrides the spec's
    ``workers`` (input units read at once; 1 reads them in this process, more as Ray tasks).
    An object-store source is reached with its spec's ``storage`` profile, else with
    ``source_storage_options``, else with ``storage_options`` (the roots' settings).
    ``task_resources``: custom Ray resources each unit task asks for (PRX_RAY_TASK_RESOURCES).
    Objects whose signature matches the unit manifest (``plan/unit_manifest.py``) are not opened;
    ``reread_unchanged`` (or the spec's) opens every object, and rewrites the manifest. Past
    ``local_max_rows`` new or changed rows, the later stages will run on Ray: Ray is told to
    start now (``core.ray_tasks.prefetch_ray``), while the rest is ingested."""
    started = time.perf_counter()
    stats = IngestStats(source=source.name)
    spec = source.spec
    workers = max(1, workers or spec.workers)
    stats.workers = workers
    if spec.shape in ("parquet", "jsonl", "lance") and not spec.fields.key:
        stats.warnings.append(
            f"source {spec.name!r} keys rows by position (fields.positional_keys): moving a row "
            "changes its key, so it is re-ingested as new and its old row deleted"
        )
    options = storage_options or None
    source_options = source_storage_options_of(spec, source_storage_options or storage_options) if source.remote else None
    ds = open_table(uri, storage_options)
    if ds is not None:
        # Tables made before a raw column existed (e.g. ingest_run_id) get it, all null.
        ds = ensure_columns(ds, raw_schema(spec.embedding_dim))
    if ds is not None and optout is not None:
        ds = ensure_columns(ds, PHASH_COLUMNS)  # an opted-out row keeps its fingerprint there (_row)
    if ds is not None:
        ds = _index_ids(ds, refresh=False)
    schema = _target_schema(source, ds)
    if ds is None and optout is not None:
        schema = pa.schema(list(schema) + list(PHASH_COLUMNS))
    existing_rows = ds.count_rows() if ds is not None else 0
    job = UnitJob(
        source=source,
        uri=uri,
        version=ds.version if ds is not None else None,
        storage_options=options,
        schema=schema,
        now=datetime.now(UTC),
        run_id=run_id,
        optout=optout,
        rows_per_fragment=rows_per_fragment,
        source_options=source_options,
        url_hash_key=load_url_key(key_uri_for_table(uri), options, create=True),
    )
    manifest_uri = unit_manifest_uri(uri)
    fingerprint = run_fingerprint(source, optout)
    plan = load_plan(manifest_uri, options, source, source_options, fingerprint) if fingerprint else None
    if plan is not None and (ds is None or reread_unchanged or spec.reread_unchanged):
        # No table to keep rows in, or told to distrust signatures: open every object.
        plan = ChangePlan(source, plan.fingerprint, None, source_options)
    seen = SeenIds(**({"spill_rows": spill_rows} if spill_rows else {}))
    spill = _Spill(metadata_schema(schema))
    recorded = ManifestRows(fingerprint) if fingerprint else None
    try:
        results, kept, involved = _run(
            job, source, workers, seen, spill, plan, recorded, manifest_uri, stats, task_resources, local_max_rows
        )
        for result in results.values():
            stats.absorb(result.stats)
        stats.warnings.extend(empty_field_warnings(stats, spec))
        if stats.seen == 0 and existing_rows and not spec.allow_empty:
            raise EmptySource(
                f"found no items where {existing_rows} rows existed (a vanished mount or an "
                "empty glob?); the last table is kept. Set allow_empty: true in the spec to accept it"
            )
        removed = seen.removed(ds) if ds is not None else REPLACED_SCHEMA.empty_table()
        if removed.num_rows and stats.file_errors:
            stats.removals_deferred = removed.num_rows
            stats.warnings.append(
                f"{stats.file_errors} file(s) could not be read: {removed.num_rows} row(s) missing from this "
                "run are kept until a run reads every file"
            )
            removed = REPLACED_SCHEMA.empty_table()
        stats.removed = removed.num_rows
        fragments = [f for r in sorted(results.values(), key=lambda r: r.unit) for f in r.fragments]
        replaced = pa.concat_tables(
            [REPLACED_SCHEMA.empty_table(), removed, *(r.replaced for r in results.values() if r.replaced is not None)]
        )
        ds = _commit(uri, ds, schema, fragments, replaced, options)
        if spill.rows:
            # Only the metadata columns are written: phash and other derived columns stay.
            superseded = {(unit, 0) for unit, r in results.items() if r.attempt > 0}
            ds.merge_insert("sample_id").when_matched_update_all().execute(spill.reader(superseded))
            ds = lance.dataset(uri, storage_options=options)
        if recorded is not None:
            # Only now: a run killed before this point leaves its objects unrecorded (read again).
            recorded.commit(manifest_uri, options, kept, involved, ds.version, run_id)
    finally:
        spill.close()
        seen.close()
        if recorded is not None:
            recorded.close()
    wrote = ds.version != job.version
    # The table now holds this spec's rows: a second spec claiming the name is the newcomer.
    record_owner(uri, source.path, options)
    ds = _compact_if_fragmented(ds, rows_per_fragment)
    ds = _index_ids(ds, refresh=wrote)
    stats.fragments = len(ds.get_fragments())
    stats.rows = ds.count_rows()
    stats.version = ds.version
    stats.seconds = time.perf_counter() - started
    return stats


def _run(
    job: UnitJob,
    source: RegisteredSource,
    workers: int,
    seen: SeenIds,
    spill: _Spill,
    plan: ChangePlan | None,
    recorded: ManifestRows | None,
    manifest_uri: str,
    stats: IngestStats,
    task_resources: dict[str, float] | None,
    local_max_rows: int = LOCAL_MAX_ROWS,
) -> tuple[dict[int, UnitResult], KeptObjects, set[str]]:
    """Every unit's result, the kept objects (with their unit index) and the objects a
    duplicated key involved (left out of the manifest: read again next run).

    A unit holding a key that an earlier unit holds is redone with that position skipped (rare:
    duplicated keys across files), so the first occurrence wins; a kept object involved is then
    read too."""
    results: dict[int, UnitResult] = {}
    kept = KeptObjects()
    # Units submitted and not back yet: a unit's entries are dropped once its result is in, so
    # the driver holds a window of units, never a listing of the whole source.
    in_flight: dict[int, Unit] = {}

    def opened(listing):
        for item in listing:
            if isinstance(item, Kept):
                kept.add(item)
                continue
            in_flight[item.index] = item
            yield item, frozenset()

    def keep(result: UnitResult, attempt: int) -> None:
        result.attempt = attempt
        results[result.unit] = result
        if result.metadata is not None:
            spill.add(result.metadata, result.unit, attempt)
        result.metadata = None

    changed = 0
    for result in run_units(
        job, opened(list_units(source, storage_options=job.source_options, plan=plan, workers=workers)), workers, task_resources
    ):
        changed += result.stats.new + result.stats.updated
        if changed > local_max_rows:
            prefetch_ray()
        seen.add(result.seen)
        unit = in_flight.pop(result.unit)
        if recorded is not None:
            # A unit redone below for a duplicated key has its objects dropped at commit.
            recorded.add_unit(
                unit,
                result.seen,
                dict(result.stats.rows_by_status),
                result.stats.file_errors,
                result.member_items,
                result.incomplete_members,
            )
        result.seen = None
        keep(result, 0)
    for table in kept_seen(manifest_uri, job.storage_options, kept, SEEN_SCHEMA):
        # A kept object's rows count as seen: not removed, and its keys still win or lose.
        seen.add(table)
        stats.seen += table.num_rows
        stats.unchanged += table.num_rows
    stats.objects_unchanged = len(kept)
    duplicates = seen.duplicates()
    involved: set[str] = set()
    if duplicates:
        by_index = kept.first_indexes()
        involved.update(by_index[i - i % PIECES] for i in duplicates if i - i % PIECES in by_index)
        relist = plan.with_forced(involved) if plan is not None else None

        def redo():
            for unit in list_units(source, storage_options=job.source_options, plan=relist, workers=workers):
                if isinstance(unit, Unit) and unit.index in duplicates:
                    involved.update(o for o, _ in unit.objects)
                    yield unit, frozenset(duplicates[unit.index])

        for result in run_units(job, redo(), workers, task_resources):
            result.seen = None
            keep(result, 1)
    return results, kept, involved


def _commit(
    uri: str, ds: lance.LanceDataset | None, schema: pa.Schema, fragments: list, replaced: pa.Table, options: dict | None
) -> lance.LanceDataset:
    """One commit: the units' new fragments, and deletion of the rows they replace and of the
    rows that left the source."""
    if ds is None:
        # An empty source still gets a table, so downstream stages see zero rows, not an error.
        return lance.LanceDataset.commit(
            uri, lance.LanceOperation.Overwrite(_lance_schema(uri, schema, options), fragments), storage_options=options
        )
    if not fragments and replaced.num_rows == 0:
        return ds
    by_fragment: dict[int, list[str]] = defaultdict(list)
    frag_ids = pc.shift_right(replaced.column("_rowaddr"), 32).to_pylist()
    for frag_id, sid in zip(frag_ids, replaced.column("sample_id").to_pylist()):
        by_fragment[frag_id].append(sid)
    updated, removed_ids = [], []
    for frag_id, ids in by_fragment.items():
        meta = delete_in_fragment(ds, frag_id, "sample_id", ids)
        if meta is None:
            removed_ids.append(frag_id)
        else:
            updated.append(meta)
    op = lance.LanceOperation.Update(removed_fragment_ids=removed_ids, updated_fragments=updated, new_fragments=fragments)
    return lance.LanceDataset.commit(uri, op, read_version=ds.version, storage_options=options)


def _lance_schema(uri: str, schema: pa.Schema, options: dict | None):
    """The table schema with the field ids ``write_fragments`` gave the units' files (a blob
    column has child fields, so ids derived from the Arrow schema would not match)."""
    from lance.fragment import write_fragments

    empty = pa.RecordBatchReader.from_batches(schema, iter([]))
    operation = write_fragments(empty, uri, schema=schema, mode="overwrite", return_transaction=True, storage_options=options).operation
    assert isinstance(operation, lance.LanceOperation.Overwrite), "mode='overwrite' makes an Overwrite"
    return operation.new_schema


def _compact_if_fragmented(ds: lance.LanceDataset, rows_per_fragment: int) -> lance.LanceDataset:
    """Many small upserts must not leave many small fragments behind."""
    rows = ds.count_rows()
    wanted = max(1, math.ceil(rows / rows_per_fragment))
    if len(ds.get_fragments()) > wanted + 1:
        ds.optimize.compact_files(target_rows_per_fragment=rows_per_fragment)
        ds = lance.dataset(ds.uri, storage_options=storage_options_of(ds))
    return ds
