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
"""

from __future__ import annotations

import hashlib
import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone

import lance
import pyarrow as pa

from prx_data.ids import sample_id
from prx_data.ingest.items import RawItem
from prx_data.ingest.probe import probe_image
from prx_data.ingest.readers import SourceUnavailable, read_source
from prx_data.filters import sql_string
from prx_data.lance_io import chunked, ensure_columns, open_table, storage_options_of
from prx_data.locking import locks_table
from prx_data.registry import RegisteredSource
from prx_data.fingerprints import ingest_fingerprint
from prx_data.schema import PHASH_COLUMNS, Status, raw_schema

# Decides at ingest whether an item is covered by an opt-out request: (source, sample_id, item)
# -> the request id, or None.
OptOutMatcher = Callable[[str, str, RawItem], "str | None"]


@dataclass
class IngestStats:
    source: str
    rows_by_status: Counter = field(default_factory=Counter)
    seen: int = 0
    new: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    duplicate_keys: list[str] = field(default_factory=list)
    duplicate_key_count: int = 0
    bytes_written: int = 0
    fragments: int = 0
    rows: int = 0
    version: int = 0
    metadata_updated: int = 0
    seconds: float = 0.0
    errors_sample: list[str] = field(default_factory=list)
    file_errors: int = 0
    removals_deferred: int = 0
    warnings: list[str] = field(default_factory=list)

    def as_metadata(self) -> dict:
        return {
            "rows": self.rows,
            "rows_seen": self.seen,
            "rows_by_status": dict(sorted(self.rows_by_status.items())),
            "new": self.new,
            "updated": self.updated,
            "metadata_updated": self.metadata_updated,
            "file_errors": self.file_errors,
            "removals_deferred": self.removals_deferred,
            "unchanged": self.unchanged,
            "removed": self.removed,
            "duplicate_keys": self.duplicate_key_count,
            "image_bytes_written": self.bytes_written,
            "fragments": self.fragments,
            "lance_version": self.version,
            "seconds": round(self.seconds, 3),
        }


class EmptySource(SourceUnavailable):
    """The source matched nothing where rows existed; the last good table is kept."""


# Raw columns that come from the source's record rather than from the image: a change here is
# applied in place, without redoing image work.
METADATA_COLUMNS = ("source_caption", "source_url", "license")


def _metadata_digest(caption, url, license, embedding) -> bytes:
    """A short fingerprint of a row's metadata columns, equal for the record and its stored row."""
    h = hashlib.blake2b(digest_size=12)
    for value in (caption, url, license):
        h.update(b"\x00" if value is None else b"\x01" + value.encode("utf-8", "surrogatepass") + b"\xff")
    if embedding is not None:
        import numpy as np

        # The table stores float32: hash what it can hold, or every run would differ.
        h.update(np.asarray(embedding, dtype=np.float32).tobytes())
    return h.digest()


@dataclass(frozen=True)
class _Existing:
    # sample_id -> (image_sha256, status, metadata digest); the one per-row structure held.
    sha: dict[str, tuple[str | None, str, bytes]]


def _load_existing(ds: lance.LanceDataset | None) -> _Existing:
    if ds is None:
        return _Existing({})
    has_embedding = "embedding" in ds.schema.names
    columns = ["sample_id", "image_sha256", "status", *METADATA_COLUMNS] + (["embedding"] if has_embedding else [])
    out: dict[str, tuple[str | None, str, bytes]] = {}
    for batch in ds.to_batches(columns=columns, batch_size=8192):
        cols = {name: batch.column(name).to_pylist() for name in columns}
        embeddings = cols.get("embedding") or [None] * batch.num_rows
        for i, sid in enumerate(cols["sample_id"]):
            out[sid] = (
                cols["image_sha256"][i],
                cols["status"][i],
                _metadata_digest(cols["source_caption"][i], cols["source_url"][i], cols["license"][i], embeddings[i]),
            )
    return _Existing(out)


def _resolve_urls(chunk: list[RawItem], spec, skip: set[str]) -> None:
    """Download, in place, the chunk's URL items that have no bytes yet."""
    pending = {item.key: item for item in chunk if item.url and item.data is None and not item.error and item.key not in skip}
    if not pending:
        return
    from prx_data.ingest.download import download_many  # httpx only for sources that need it
    for result in download_many(((k, it.url) for k, it in pending.items()), spec.download):
        item = pending[result.key]
        if result.status == Status.OK:
            item.data = result.data
        else:
            item.error = result.error or str(result.status)
            item.error_status = Status(result.status).value


def _row(source: RegisteredSource, item: RawItem, now: datetime, optout: OptOutMatcher | None) -> dict:
    spec = source.spec
    sid = sample_id(spec.name, item.key)
    row = {
        "sample_id": sid,
        "source": spec.name,
        "source_key": item.key,
        "image": None,
        "image_format": None,
        "image_sha256": None,
        "width": None,
        "height": None,
        "source_caption": item.caption,
        "source_url": item.source_url,
        "license": item.license,
        "status": Status.OK.value,
        "error": None,
        "ingested_at": now,
    }
    if spec.embedding_dim:
        emb = item.embedding
        # Readers reject a wrong-length embedding; this guards other producers of items.
        row["embedding"] = emb if emb is not None and len(emb) == spec.embedding_dim else None
    request = optout(spec.name, sid, item) if optout else None
    if request:
        # The bytes are not kept, their fingerprint is: copies elsewhere stay excluded.
        row.update(status=Status.OPTED_OUT.value, error=f"opt-out request {request}", **ingest_fingerprint(item.data))
        return row
    if item.error:
        row.update(status=item.error_status or Status.INVALID_IMAGE.value, error=item.error)
        return row
    probe = probe_image(item.data, spec.max_pixels, spec.max_bytes, spec.formats)
    row.update(
        image_format=probe.image_format,
        image_sha256=probe.sha256,
        width=probe.width,
        height=probe.height,
        status=probe.status.value,
        error=probe.error,
    )
    # Undecodable bytes are kept for inspection; bytes over a limit are not stored.
    if probe.status in (Status.OK, Status.INVALID_IMAGE):
        row["image"] = item.data
    return row


def _unique_items(items: Iterable[RawItem], name: str, stats: IngestStats, present: set[str]) -> Iterator[tuple[str, RawItem]]:
    """(sample_id, item) for the first item of each key; ``present`` doubles as the seen-set."""
    for item in items:
        stats.seen += 1
        sid = sample_id(name, item.key)
        if sid in present:
            stats.duplicate_key_count += 1
            if len(stats.duplicate_keys) < 20:
                stats.duplicate_keys.append(item.key)
            continue
        present.add(sid)
        if item.file_level:
            stats.file_errors += 1
        yield sid, item


def _item_digest(item: RawItem, spec) -> bytes:
    license = item.license
    emb = item.embedding if spec.embedding_dim and item.embedding is not None and len(item.embedding) == spec.embedding_dim else None
    return _metadata_digest(item.caption, item.source_url, license, emb if spec.embedding_dim else None)


def _metadata_row(sid: str, item: RawItem, spec, now: datetime) -> dict:
    row = {"sample_id": sid, "source_caption": item.caption, "source_url": item.source_url, "license": item.license, "ingested_at": now}
    if spec.embedding_dim:
        row["embedding"] = item.embedding
    return row


@dataclass
class _Changes:
    """One chunk's writes: whole rows (new or image changed) and metadata-only updates."""

    rows: list[dict] = field(default_factory=list)
    metadata: list[dict] = field(default_factory=list)


def iter_changes(
    source: RegisteredSource,
    existing: _Existing,
    stats: IngestStats,
    present: set[str],
    optout: OptOutMatcher | None = None,
    chunk_size: int = 256,
) -> Iterator[_Changes]:
    """Yield each chunk's changes; count the rest as unchanged.

    ``present`` collects the sample ids the source holds now, to find rows that left it.
    """
    spec = source.spec
    now = datetime.now(timezone.utc)
    fetched_statuses = (Status.OK.value, Status.OPTED_OUT.value)
    for chunk in chunked(_unique_items(read_source(source), spec.name, stats, present), chunk_size):
        # A URL fetched successfully before is not fetched again.
        skip = {
            it.key
            for sid, it in chunk
            if it.url and not it.error and sid in existing.sha and existing.sha[sid][1] in fetched_statuses
        }
        _resolve_urls([it for _, it in chunk], spec, skip)
        changes = _Changes()
        for sid, item in chunk:
            before = existing.sha.get(sid)
            if item.key in skip:
                stats.rows_by_status[before[1]] += 1
                if before[2] != _item_digest(item, spec):
                    stats.metadata_updated += 1
                    changes.metadata.append(_metadata_row(sid, item, spec, now))
                else:
                    stats.unchanged += 1
                continue
            row = _row(source, item, now, optout)
            stats.rows_by_status[row["status"]] += 1
            if row["error"] and len(stats.errors_sample) < 20:
                stats.errors_sample.append(f"{item.key}: {row['error']}")
            if before is not None and before[:2] == (row["image_sha256"], row["status"]):
                digest = _metadata_digest(row["source_caption"], row["source_url"], row["license"], row.get("embedding"))
                if before[2] != digest:
                    stats.metadata_updated += 1
                    changes.metadata.append(_metadata_row(sid, item, spec, now))
                else:
                    stats.unchanged += 1
                continue
            if before is None:
                stats.new += 1
            else:
                stats.updated += 1
            if row["image"] is not None:
                stats.bytes_written += len(row["image"])
            changes.rows.append(row)
        if changes.rows or changes.metadata:
            yield changes


def _target_schema(source: RegisteredSource, ds: lance.LanceDataset | None) -> pa.Schema:
    schema = raw_schema(source.spec.embedding_dim)
    if ds is None:
        return schema
    # Changed rows carry the derived columns as nulls, so later stages redo them.
    extra = [f for f in ds.schema if f.name not in schema.names]
    return pa.schema(list(schema) + extra)


def _batch(rows: list[dict], schema: pa.Schema) -> pa.RecordBatch:
    return pa.record_batch([pa.array([r.get(f.name) for r in rows], type=f.type) for f in schema], schema=schema)


def _metadata_schema(schema: pa.Schema) -> pa.Schema:
    names = ("sample_id", *METADATA_COLUMNS, "ingested_at", "ingest_run_id", "embedding")
    return pa.schema([schema.field(n) for n in names if n in schema.names])


class _Spill:
    """Metadata-only updates, spilled to a local Arrow file so memory stays flat however many."""

    def __init__(self, schema: pa.Schema) -> None:
        import tempfile

        self.schema = schema
        self._dir = tempfile.TemporaryDirectory(prefix="prx-ingest-")
        self.path = f"{self._dir.name}/metadata.arrow"
        self._writer = None
        self.rows = 0

    def add(self, rows: list[dict]) -> None:
        import pyarrow.ipc as ipc

        if self._writer is None:
            self._writer = ipc.new_file(self.path, self.schema)
        self._writer.write_batch(_batch(rows, self.schema))
        self.rows += len(rows)

    def reader(self) -> pa.RecordBatchReader:
        import pyarrow.ipc as ipc

        self._writer.close()
        file = ipc.open_file(pa.memory_map(self.path))
        return pa.RecordBatchReader.from_batches(self.schema, (file.get_batch(i) for i in range(file.num_record_batches)))

    def close(self) -> None:
        self._dir.cleanup()


def _row_batches(changes: Iterator[_Changes], schema: pa.Schema, spill: _Spill, run_id: str | None) -> Iterator[pa.RecordBatch]:
    for change in changes:
        for row in (*change.rows, *change.metadata):
            row["ingest_run_id"] = run_id
        if change.metadata:
            spill.add(change.metadata)
        if change.rows:
            yield _batch(change.rows, schema)


@locks_table("uri")
def ingest_source(
    source: RegisteredSource,
    uri: str,
    *,
    rows_per_fragment: int = 1_000_000,
    storage_options: dict | None = None,
    optout: OptOutMatcher | None = None,
    run_id: str | None = None,
) -> IngestStats:
    """``run_id`` (e.g. Dagster's ``context.run_id``) goes to ``ingest_run_id`` on every row this
    run writes, so lineage names the run that made each row."""
    started = time.perf_counter()
    stats = IngestStats(source=source.name)
    spec = source.spec
    if spec.shape in ("parquet", "jsonl", "lance") and not spec.fields.key:
        stats.warnings.append(
            f"source {spec.name!r} keys rows by position (fields.positional_keys): moving a row "
            "changes its key, so it is re-ingested as new and its old row deleted"
        )
    options = storage_options or None
    ds = open_table(uri, storage_options)
    if ds is not None:
        # Tables made before a raw column existed (e.g. ingest_run_id) get it, all null.
        ds = ensure_columns(ds, raw_schema(spec.embedding_dim))
    if ds is not None and optout is not None:
        ds = ensure_columns(ds, PHASH_COLUMNS)  # an opted-out row keeps its fingerprint there (_row)
    existing = _load_existing(ds)
    schema = _target_schema(source, ds)
    if ds is None and optout is not None:
        schema = pa.schema(list(schema) + list(PHASH_COLUMNS))
    present: set[str] = set()
    spill = _Spill(_metadata_schema(schema))
    try:
        batches = _row_batches(iter_changes(source, existing, stats, present, optout), schema, spill, run_id)
        first = next(batches, None)
        if stats.seen == 0 and existing.sha and not spec.allow_empty:
            raise EmptySource(
                f"found no items where {len(existing.sha)} rows existed (a vanished mount or an "
                "empty glob?); the last table is kept. Set allow_empty: true in the spec to accept it"
            )
        if first is not None:
            reader = pa.RecordBatchReader.from_batches(schema, itertools.chain([first], batches))
            if ds is None:
                ds = lance.write_dataset(reader, uri, schema=schema, mode="overwrite", max_rows_per_file=rows_per_fragment, storage_options=options)
            else:
                ds.merge_insert("sample_id").when_matched_update_all().when_not_matched_insert_all().execute(reader)
                ds = lance.dataset(uri, storage_options=options)
        elif ds is None:
            # An empty source still gets a table, so downstream stages see zero rows, not an error.
            ds = lance.write_dataset(pa.table({f.name: pa.array([], f.type) for f in schema}, schema=schema), uri, mode="overwrite", storage_options=options)
        if spill.rows:
            # Only the metadata columns are written: phash and other derived columns stay.
            ds.merge_insert("sample_id").when_matched_update_all().execute(spill.reader())
            ds = lance.dataset(uri, storage_options=options)
    finally:
        spill.close()

    removed = [sid for sid in existing.sha if sid not in present]
    if removed and stats.file_errors:
        stats.removals_deferred = len(removed)
        stats.warnings.append(
            f"{stats.file_errors} file(s) could not be read: {len(removed)} row(s) missing from this "
            "run are kept until a run reads every file"
        )
        removed = []
    for ids in chunked(removed, 1000):
        ds.delete(f"sample_id IN ({', '.join(sql_string(i) for i in ids)})")
    if removed:
        stats.removed = len(removed)
        ds = lance.dataset(uri, storage_options=options)
    ds = _compact_if_fragmented(ds, rows_per_fragment)
    stats.fragments = len(ds.get_fragments())
    stats.rows = ds.count_rows()
    stats.version = ds.version
    stats.seconds = time.perf_counter() - started
    return stats


def _compact_if_fragmented(ds: lance.LanceDataset, rows_per_fragment: int) -> lance.LanceDataset:
    """Many small upserts must not leave many small fragments behind."""
    rows = ds.count_rows()
    wanted = max(1, math.ceil(rows / rows_per_fragment))
    if len(ds.get_fragments()) > wanted + 1:
        ds.optimize.compact_files(target_rows_per_fragment=rows_per_fragment)
        ds = lance.dataset(ds.uri, storage_options=storage_options_of(ds))
    return ds
