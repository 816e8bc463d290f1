"""Ingest one source into its Lance table in the common schema.

Streaming end to end (reader -> download -> probe -> record batches -> Lance), so memory stays
flat as a source grows. Re-running is idempotent and incremental: rows whose bytes did not
change are left alone (and URLs already fetched are not fetched again), new and changed rows are
upserted in one commit, and rows that left the source are deleted.
"""

from __future__ import annotations

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
from prx_data.ingest.readers import read_source
from prx_data.filters import sql_string
from prx_data.lance_io import chunked, open_table, storage_options_of
from prx_data.locking import locks_table
from prx_data.registry import RegisteredSource
from prx_data.schema import Status, raw_schema

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
    seconds: float = 0.0
    errors_sample: list[str] = field(default_factory=list)

    def as_metadata(self) -> dict:
        return {
            "rows": self.rows,
            "rows_seen": self.seen,
            "rows_by_status": dict(sorted(self.rows_by_status.items())),
            "new": self.new,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "removed": self.removed,
            "duplicate_keys": self.duplicate_key_count,
            "image_bytes_written": self.bytes_written,
            "fragments": self.fragments,
            "lance_version": self.version,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class _Existing:
    sha: dict[str, tuple[str | None, str]]  # sample_id -> (image_sha256, status)


def _load_existing(ds: lance.LanceDataset | None) -> _Existing:
    if ds is None:
        return _Existing({})
    table = ds.to_table(columns=["sample_id", "image_sha256", "status"])
    return _Existing(
        dict(
            zip(
                table.column("sample_id").to_pylist(),
                zip(table.column("image_sha256").to_pylist(), table.column("status").to_pylist()),
            )
        )
    )


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
        row["embedding"] = emb if emb is not None and len(emb) == spec.embedding_dim else None
    request = optout(spec.name, sid, item) if optout else None
    if request:
        row.update(status=Status.OPTED_OUT.value, error=f"opt-out request {request}")
        return row
    if item.error:
        row.update(status=item.error_status or Status.INVALID_IMAGE.value, error=item.error)
        return row
    probe = probe_image(item.data, spec.max_pixels, spec.max_bytes)
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


def _unique_items(items: Iterable[RawItem], stats: IngestStats) -> Iterator[RawItem]:
    seen: set[str] = set()
    for item in items:
        stats.seen += 1
        if item.key in seen:
            stats.duplicate_key_count += 1
            if len(stats.duplicate_keys) < 20:
                stats.duplicate_keys.append(item.key)
            continue
        seen.add(item.key)
        yield item


def iter_changed_rows(
    source: RegisteredSource,
    existing: _Existing,
    stats: IngestStats,
    present: set[str],
    optout: OptOutMatcher | None = None,
    chunk_size: int = 256,
) -> Iterator[list[dict]]:
    """Yield chunks of rows that are new or changed; count the rest as unchanged.

    ``present`` collects the sample ids the source holds now, to find rows that left it.
    """
    name = source.spec.name
    # A URL fetched successfully before is not fetched again.
    fetched = {sid for sid, (_, status) in existing.sha.items() if status in (Status.OK.value, Status.OPTED_OUT.value)}
    now = datetime.now(timezone.utc)
    for chunk in chunked(_unique_items(read_source(source), stats), chunk_size):
        skip = {it.key for it in chunk if it.url and sample_id(name, it.key) in fetched}
        _resolve_urls(chunk, source.spec, skip)
        rows = []
        for item in chunk:
            sid = sample_id(name, item.key)
            present.add(sid)
            if item.key in skip:
                stats.unchanged += 1
                stats.rows_by_status[existing.sha[sid][1]] += 1
                continue
            row = _row(source, item, now, optout)
            stats.rows_by_status[row["status"]] += 1
            before = existing.sha.get(sid)
            if before is not None and before == (row["image_sha256"], row["status"]):
                stats.unchanged += 1
                continue
            if before is None:
                stats.new += 1
            else:
                stats.updated += 1
            if row["image"] is not None:
                stats.bytes_written += len(row["image"])
            if row["error"] and len(stats.errors_sample) < 20:
                stats.errors_sample.append(f"{item.key}: {row['error']}")
            rows.append(row)
        if rows:
            yield rows


def _target_schema(source: RegisteredSource, ds: lance.LanceDataset | None) -> pa.Schema:
    schema = raw_schema(source.spec.embedding_dim)
    if ds is None:
        return schema
    # Changed rows carry the derived columns as nulls, so later stages redo them.
    extra = [f for f in ds.schema if f.name not in schema.names]
    return pa.schema(list(schema) + extra)


def _batches(row_chunks: Iterator[list[dict]], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for rows in row_chunks:
        columns = {f.name: [r.get(f.name) for r in rows] for f in schema}
        yield pa.record_batch([pa.array(columns[f.name], type=f.type) for f in schema], schema=schema)


@locks_table("uri")
def ingest_source(
    source: RegisteredSource,
    uri: str,
    *,
    rows_per_fragment: int = 1_000_000,
    storage_options: dict | None = None,
    optout: OptOutMatcher | None = None,
) -> IngestStats:
    started = time.perf_counter()
    stats = IngestStats(source=source.name)
    ds = open_table(uri, storage_options)
    existing = _load_existing(ds)
    schema = _target_schema(source, ds)
    present: set[str] = set()
    batches = _batches(iter_changed_rows(source, existing, stats, present, optout), schema)
    first = next(batches, None)
    if first is not None:
        reader = pa.RecordBatchReader.from_batches(schema, itertools.chain([first], batches))
        if ds is None:
            ds = lance.write_dataset(
                reader,
                uri,
                schema=schema,
                mode="overwrite",
                max_rows_per_file=rows_per_fragment,
                storage_options=storage_options or None,
            )
        else:
            ds.merge_insert("sample_id").when_matched_update_all().when_not_matched_insert_all().execute(reader)
            ds = lance.dataset(uri, storage_options=storage_options or None)
    elif ds is None:
        # An empty source still gets a table, so downstream stages see zero rows, not an error.
        ds = lance.write_dataset(pa.table({f.name: pa.array([], f.type) for f in schema}, schema=schema), uri, mode="overwrite", storage_options=storage_options or None)

    removed = [sid for sid in existing.sha if sid not in present]
    for ids in chunked(removed, 1000):
        ds.delete(f"sample_id IN ({', '.join(sql_string(i) for i in ids)})")
    if removed:
        stats.removed = len(removed)
        ds = lance.dataset(uri, storage_options=storage_options or None)
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
