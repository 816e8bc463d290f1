"""The unit tasks of one ingest: the work of one input unit (a Ray task, or a call in the
driver), and running many of them.

One unit is read, probed, compared with the table, and its new and changed rows written as
uncommitted Lance fragments. Memory stays flat: items are handled in chunks, and each chunk's
stored rows are looked up in the table by a filtered scan on ``sample_id`` (index-backed, see
``driver.py``), never loaded as a whole. Nothing is committed here; the driver commits every
unit's fragments at once, so a killed run leaves the last version as it was (the orphaned
files are unreferenced).

Units run in this process (``workers: 1``), or as Ray tasks, ``workers`` at a time. The Ray used
is the one the process has (a RayResource), else the command's shared head (``PRX_RAY_ADDRESS``,
see ``prx_data.app.local_ray``), else a local Ray started for this ingest and stopped after it.
Submission is bounded, so a source of a million units is never a million queued tasks, and
results come back in completion order.

Plain module: Ray workers import it without Dagster.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import lance
import pyarrow as pa
from lance.fragment import FragmentMetadata, write_fragments

from prx_data.compat.ray_config import in_process_ray_auth
from prx_data.core.filters import one_of
from prx_data.core.ids import escape_undecodable, is_utf8, normal_key, sample_id
from prx_data.core.lance_io import chunked
from prx_data.core.quiet import quiet_ray_env
from prx_data.core.ray_tasks import ADDRESS_VAR, bounded, ensure_ray, task_options
from prx_data.core.schema import Status
from prx_data.core.urls import redact_url, url_key
from prx_data.ingest.plan.seen_ids import REPLACED_SCHEMA, SEEN_SCHEMA
from prx_data.ingest.plan.unit_manifest import RETRY_STATUSES
from prx_data.ingest.read.raw_item import RawItem
from prx_data.ingest.read.units import Unit, read_unit_members
from prx_data.ingest.registry import RegisteredSource
from prx_data.ingest.rows.ingest_stats import EXAMPLES, IngestStats, count_empty_fields
from prx_data.ingest.rows.raw_row import (
    METADATA_COLUMNS,
    OptOutMatcher,
    apply_download,
    item_digest,
    item_row,
    metadata_digest,
    metadata_row,
    metadata_schema,
    probe_item,
    to_batch,
)

# Statuses whose URL was fetched: such a row's URL is not fetched again.
_FETCHED = (Status.OK.value, Status.OPTED_OUT.value)


def undecodable_name(item: RawItem) -> RawItem:
    """An item whose name is not UTF-8 (a file or tar member name): one ``invalid_record`` row
    under its percent-escaped key, instead of an error that fails the whole source."""
    key = escape_undecodable(item.key)
    return RawItem(
        key=key,
        error=f"name is not valid UTF-8: {key} (undecodable bytes shown as %XX)",
        error_status=Status.INVALID_RECORD.value,
        file_level=item.file_level,
    )


@dataclass(frozen=True)
class UnitJob:
    """What every unit of one run shares (sent to each Ray worker once)."""

    source: RegisteredSource
    uri: str
    version: int | None  # the table version compared against; None before the first ingest
    storage_options: dict | None
    schema: pa.Schema  # of the rows written
    now: datetime
    run_id: str | None = None
    optout: OptOutMatcher | None = None
    rows_per_fragment: int = 1_000_000
    chunk_size: int = 256
    source_options: dict | None = None  # reach an object-store source (read by each worker)
    url_hash_key: bytes | None = None  # the root's key for source_url_key (core/urls.py)


@dataclass
class UnitResult:
    unit: int
    stats: IngestStats
    fragments: list[FragmentMetadata] = field(default_factory=list)
    seen: pa.Table | None = None  # SEEN_SCHEMA: every sample id this unit holds, first occurrences
    replaced: pa.Table | None = None  # REPLACED_SCHEMA: stored rows that new rows replace
    metadata: pa.Table | None = None  # metadata-only updates, in metadata_schema(job.schema)
    attempt: int = 0  # 1 when the unit was redone to skip keys an earlier unit holds
    # A group of files (``Unit.files``): items read from each file, and the files with an
    # outcome to read again (a file error, a failed download): for the unit manifest.
    member_items: list[int] | None = None
    incomplete_members: list[int] = field(default_factory=list)


class _Stored:
    """The stored rows of one chunk's sample ids: (sha, status, metadata digest, row address,
    stored source URL, stored URL key)."""

    def __init__(self, ds: lance.LanceDataset | None) -> None:
        self.ds = ds
        self.columns = []
        if ds is not None:
            extra = [c for c in ("embedding", "source_url_key") if c in ds.schema.names]
            self.columns = ["sample_id", "image_sha256", "status", *METADATA_COLUMNS, *extra]

    def lookup(self, ids: list[str]) -> dict[str, tuple[str | None, str, bytes, int, str | None, str | None]]:
        if self.ds is None or not ids:
            return {}
        table = self.ds.to_table(columns=self.columns, filter=one_of("sample_id", ids), with_row_address=True)
        cols = {name: table.column(name).to_pylist() for name in (*self.columns, "_rowaddr")}
        embeddings = cols.get("embedding") or [None] * table.num_rows
        keys = cols.get("source_url_key") or [None] * table.num_rows
        return {
            sid: (
                cols["image_sha256"][i],
                cols["status"][i],
                metadata_digest(cols["source_caption"][i], cols["source_url"][i], cols["license"][i], embeddings[i]),
                cols["_rowaddr"][i],
                cols["source_url"][i],
                keys[i],
            )
            for i, sid in enumerate(cols["sample_id"])
        }


def process_unit(job: UnitJob, unit: Unit, skip: frozenset[int] = frozenset()) -> UnitResult:
    """``skip``: positions in the unit whose key an earlier unit holds (duplicates, not read)."""
    source, spec = job.source, job.source.spec
    ds = lance.dataset(job.uri, version=job.version, storage_options=job.storage_options) if job.version is not None else None
    stored = _Stored(ds)
    stats = IngestStats(source=source.name, units=1)
    seen: dict[str, list] = {"sample_id": [], "unit": [], "pos": []}
    replaced: dict[str, list] = {"sample_id": [], "_rowaddr": []}
    meta_rows: list[dict] = []
    local: set[str] = set()  # this unit's ids: bounded by the unit's size, not the source's
    member_items = [0] * len(unit.files)
    incomplete: set[int] = set()

    def picked(pairs):
        for pos, (member, item) in pairs:
            stats.seen += 1
            if member_items:
                member_items[member] += 1
            if not is_utf8(item.key):
                item = undecodable_name(item)
            # One spelling per key: two files whose names normalise alike are a repeated key.
            item.key = normal_key(item.key)
            sid = sample_id(spec.name, item.key)
            if pos in skip or sid in local:
                stats.duplicate_key_count += 1
                if len(stats.duplicate_keys) < EXAMPLES:
                    stats.duplicate_keys.append(item.key)
                continue
            local.add(sid)
            count_empty_fields(stats, item, spec)
            seen["sample_id"].append(sid)
            seen["unit"].append(unit.index)
            seen["pos"].append(pos)
            if item.file_level:
                stats.file_errors += 1
                incomplete.add(member)
            yield sid, member, item

    def prepared():
        # The stored rows are looked up a chunk at a time (one filtered scan per chunk); the
        # downloads themselves stream across chunks with no barrier between them.
        for chunk in chunked(picked(enumerate(read_unit_members(source, unit, job.source_options))), job.chunk_size):
            before_of = stored.lookup([sid for sid, _, _ in chunk])
            for sid, member, item in chunk:
                before = before_of.get(sid)
                # A URL already fetched (ok or opted out) is not fetched again; a key whose URL
                # changed is, or its row would name one URL and hold another's bytes. Compared
                # redacted, as stored: a re-signed URL (new credentials, same object) is the same.
                fetched = bool(
                    item.url
                    and not item.error
                    and before is not None
                    and before[1] in _FETCHED
                    and before[4] == redact_url(item.source_url or item.url)
                )
                wanted = item.url and item.data is None and not item.error and not fetched
                yield (sid, member, item, before, fetched), item.key, item.url if wanted else None

    def batches():
        rows = []
        for (sid, member, item, before, fetched), done in _downloaded(source, prepared()):
            result, probe = done or (None, None)
            if result is not None:
                apply_download(item, result)
            if fetched:
                stats.rows_by_status[before[1]] += 1
                if before[1] in RETRY_STATUSES:
                    incomplete.add(member)
                _metadata_or_unchanged(before[2] != item_digest(item, spec) or _rekeyed(before, item), sid, item)
                continue
            row = item_row(source, item, job.now, job.optout, job.url_hash_key, probe)
            item.data = None  # the row holds the bytes now; the item may outlive this loop
            stats.rows_by_status[row["status"]] += 1
            if row["status"] in RETRY_STATUSES:
                incomplete.add(member)
            if row["error"] and len(stats.errors_sample) < EXAMPLES:
                stats.errors_sample.append(f"{item.key}: {row['error']}")
            if before is not None and before[:2] == (row["image_sha256"], row["status"]):
                digest = metadata_digest(row["source_caption"], row["source_url"], row["license"], row.get("embedding"))
                _metadata_or_unchanged(before[2] != digest or _rekeyed(before, item), sid, item)
                continue
            if before is None:
                stats.new += 1
            else:
                stats.updated += 1
                replaced["sample_id"].append(sid)
                replaced["_rowaddr"].append(before[3])
            if row["image"] is not None:
                stats.bytes_written += len(row["image"])
            row["ingest_run_id"] = job.run_id
            rows.append(row)
            if len(rows) >= job.chunk_size:
                yield to_batch(rows, job.schema)
                rows = []
        if rows:
            yield to_batch(rows, job.schema)

    def _rekeyed(before, item) -> bool:
        # A row hashed under an earlier URL key rule gets the current key (core/urls.py).
        return job.url_hash_key is not None and before[5] != url_key(item.source_url, job.url_hash_key)

    def _metadata_or_unchanged(changed: bool, sid, item) -> None:
        if changed:
            stats.metadata_updated += 1
            row = metadata_row(sid, item, spec, job.now, job.url_hash_key)
            row["ingest_run_id"] = job.run_id
            meta_rows.append(row)
        else:
            stats.unchanged += 1

    fragments = _write(job, batches())
    meta_schema = metadata_schema(job.schema)
    return UnitResult(
        unit=unit.index,
        stats=stats,
        fragments=fragments,
        seen=pa.table(seen, schema=SEEN_SCHEMA),
        replaced=pa.table(replaced, schema=REPLACED_SCHEMA),
        metadata=pa.Table.from_batches([to_batch(meta_rows, meta_schema)]) if meta_rows else None,
        member_items=member_items if unit.files else None,
        incomplete_members=sorted(incomplete) if unit.files else [],
    )


def _downloaded(source, items):
    """``(tag, key, url-or-None)`` -> ``(tag, (result, probe)-or-None)``: the URL items through
    this process's long-lived download session, in completion order, each downloaded image
    already probed in its download thread. A source without URLs never imports the HTTP client nor starts
    a download pool."""
    items = iter(items)

    def probed(result):
        # An item whose download was fetched already (``fetched``) is never sent here, so
        # the probe is never wasted on bytes that will not be stored.
        return result, probe_item(source, result.data) if result.ok else None

    for tag, key, url in items:
        if url is None:
            yield tag, None
            continue
        # lazy: the HTTP client and its thread pool, only for sources that download
        from prx_data.ingest.http.download_session import shared_session

        yield from shared_session(source.spec.download).stream(itertools.chain([(tag, key, url)], items), then=probed)
        return


def _write(job: UnitJob, batches) -> list[FragmentMetadata]:
    first = next(batches, None)
    if first is None:
        return []

    def all_batches():
        yield first
        yield from batches

    reader = pa.RecordBatchReader.from_batches(job.schema, all_batches())
    return write_fragments(reader, job.uri, schema=job.schema, max_rows_per_file=job.rows_per_fragment, storage_options=job.storage_options)


UnitWork = tuple[Unit, frozenset[int]]


def run_units(
    job: UnitJob, units: Iterable[UnitWork], workers: int, task_resources: dict[str, float] | None = None
) -> Iterator[UnitResult]:
    """``task_resources``: custom Ray resources each unit task asks for (where it may run)."""
    if workers <= 1:
        for unit, skip in units:
            yield process_unit(job, unit, skip)
        return
    with _ray(workers) as ray:
        yield from _on_ray(ray, job, iter(units), workers, task_resources)


def _on_ray(ray, job: UnitJob, units: Iterator[UnitWork], workers: int, task_resources: dict[str, float] | None) -> Iterator[UnitResult]:
    # A retried task writes fresh fragments; the failed attempt's are never committed.
    task = ray.remote(**task_options(num_cpus=1, max_retries=1, resources=task_resources))(process_unit)
    job_ref = ray.put(job)
    yield from bounded(ray, lambda work: task.remote(job_ref, *work), units, workers)


@contextlib.contextmanager
def _ray(workers: int):
    import ray

    # The run's own connection when it has one (joined now, on demand), else the command's head.
    if ensure_ray(required=False) is not None:
        yield ray
        return
    address = os.environ.get(ADDRESS_VAR) or None

    os.environ.update({k: v for k, v in quiet_ray_env().items() if k not in os.environ})
    options: dict[str, Any] = dict(ignore_reinit_error=True, include_dashboard=False, configure_logging=False, log_to_driver=False)
    with contextlib.ExitStack() as stack:
        if address:
            ray.init(address=address, **options)
        else:
            stack.enter_context(in_process_ray_auth())  # a Ray of its own: token auth, loopback
            ray.init(num_cpus=workers, _node_ip_address="127.0.0.1", **options)
        try:
            yield ray
        finally:
            ray.shutdown()  # only this process's connection (or the Ray it started)
