"""One item of a source as a row of its raw table, and the fingerprints change detection
compares (image hash and status, metadata digest)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime

import pyarrow as pa

from prx_data.core.ids import sample_id
from prx_data.core.schema import Status
from prx_data.core.urls import redact_text, redact_url, url_key
from prx_data.imaging.fingerprints import ingest_fingerprint
from prx_data.ingest.items import RawItem
from prx_data.ingest.probe import Probe, probe_image
from prx_data.ingest.registry import RegisteredSource

# Decides at ingest whether an item is covered by an opt-out request: (source, sample_id, item)
# -> the request id, or None.
OptOutMatcher = Callable[[str, str, RawItem], "str | None"]

# Raw columns that come from the source's record rather than from the image: a change here is
# applied in place, without redoing image work.
METADATA_COLUMNS = ("source_caption", "source_url", "license")

EXAMPLES = 20  # duplicate keys and row errors named in a run's summary


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
    units: int = 0
    workers: int = 1
    objects_unchanged: int = 0  # input objects not opened: same signature as when last read
    records: int = 0  # items read from a record that parsed (what empty_fields counts against)
    empty_fields: Counter = field(default_factory=Counter)  # named optional field -> records without it

    def absorb(self, part: IngestStats) -> None:
        """Add one unit's counts to the run's."""
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(part, f.name)
            if f.name in ("source", "fragments", "rows", "version", "seconds", "workers"):
                continue
            if isinstance(mine, Counter):
                mine.update(theirs)
            elif isinstance(mine, list):
                limit = EXAMPLES if f.name != "warnings" else None
                mine.extend(theirs[: None if limit is None else max(0, limit - len(mine))])
            else:
                setattr(self, f.name, mine + theirs)

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
            "input_units": self.units,
            "objects_unchanged": self.objects_unchanged,
            "workers": self.workers,
            "seconds": round(self.seconds, 3),
        }


def count_empty_fields(stats: IngestStats, item: RawItem, spec) -> None:
    """Count a parsed record's empty optional fields, so a field empty in every record (most
    often a misspelt name in a JSONL spec, which has no schema to check) can be named once."""
    if item.file_level or item.error:
        return
    stats.records += 1
    fields = spec.fields
    values = {"caption": item.caption, "embedding": item.embedding}
    if fields.image_kind != "url":  # a URL image fills source_url itself
        values["url"] = item.source_url
    if not spec.license:  # the spec's license fills an empty one
        values["license"] = item.license
    for name, value in values.items():
        if getattr(fields, name) and value is None:
            stats.empty_fields[name] += 1


def empty_field_warnings(stats: IngestStats, spec) -> list[str]:
    return [
        f"fields.{name} {getattr(spec.fields, name)!r} is empty in all {stats.records} records read: a misspelt field name?"
        for name, empty in sorted(stats.empty_fields.items())
        if stats.records and empty == stats.records
    ]


def metadata_digest(caption, url, license, embedding) -> bytes:
    """A short fingerprint of a row's metadata columns, equal for the record and its stored row."""
    h = hashlib.blake2b(digest_size=12)
    for value in (caption, url, license):
        h.update(b"\x00" if value is None else b"\x01" + value.encode("utf-8", "surrogatepass") + b"\xff")
    if embedding is not None:
        import numpy as np

        # The table stores float32: hash what it can hold, or every run would differ.
        h.update(np.asarray(embedding, dtype=np.float32).tobytes())
    return h.digest()


def item_digest(item: RawItem, spec) -> bytes:
    emb = item.embedding if spec.embedding_dim and item.embedding is not None and len(item.embedding) == spec.embedding_dim else None
    # The stored row holds the redacted URL: compare like with like (a row stored before
    # redaction differs, so the next run rewrites it redacted).
    return metadata_digest(item.caption, redact_url(item.source_url), item.license, emb if spec.embedding_dim else None)


def apply_download(item: RawItem, result) -> None:
    """Put a download's bytes, or its failure, on the item it was for."""
    if result.status == Status.OK:
        item.data = result.data
    else:
        item.error = result.error or str(result.status)
        item.error_status = Status(result.status).value


def _url_columns(item: RawItem, key: bytes | None) -> dict:
    """The URL as stored: redacted, with the keyed hash of the original (never the original)."""
    return {"source_url": redact_url(item.source_url), "source_url_key": url_key(item.source_url, key) if key else None}


# Rows with these statuses hold bytes that are not an image this pipeline can use; keeping them
# would turn the table into a copy of whatever files or responses a spec pointed at.
_NO_BYTES = frozenset(s.value for s in Status) - {Status.OK.value}


def item_row(
    source: RegisteredSource,
    item: RawItem,
    now: datetime,
    optout: OptOutMatcher | None,
    url_hash_key: bytes | None = None,
    probe: Probe | None = None,
) -> dict:
    """``probe``: ``probe_item(source, item.data)`` when already computed (in a download thread)."""
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
        **_url_columns(item, url_hash_key),
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
        row.update(status=item.error_status or Status.INVALID_IMAGE.value, error=redact_text(item.error))
        return row
    if probe is None:
        probe = probe_item(source, item.data)
    row.update(
        image_format=probe.image_format,
        image_sha256=probe.sha256,
        width=probe.width,
        height=probe.height,
        status=probe.status.value,
        error=redact_text(probe.error),
    )
    # Only a valid image keeps its bytes: undecodable ones (a spec's path pointing at any
    # readable file, an HTML error page) are described by status, error and sha256 instead.
    if probe.status.value not in _NO_BYTES:
        row["image"] = item.data
    return row


def probe_item(source: RegisteredSource, data: bytes | None) -> Probe:
    """The checks ``item_row`` applies to an item's bytes, under the source's limits."""
    spec = source.spec
    return probe_image(data, spec.max_pixels, spec.max_bytes, spec.formats)


def metadata_row(sid: str, item: RawItem, spec, now: datetime, url_hash_key: bytes | None = None) -> dict:
    row = {
        "sample_id": sid,
        "source_caption": item.caption,
        **_url_columns(item, url_hash_key),
        "license": item.license,
        "ingested_at": now,
    }
    if spec.embedding_dim:
        row["embedding"] = item.embedding
    return row


def to_batch(rows: list[dict], schema: pa.Schema) -> pa.RecordBatch:
    return pa.record_batch([pa.array([r.get(f.name) for r in rows], type=f.type) for f in schema], schema=schema)


def metadata_schema(schema: pa.Schema) -> pa.Schema:
    names = ("sample_id", *METADATA_COLUMNS, "source_url_key", "ingested_at", "ingest_run_id", "embedding")
    return pa.schema([schema.field(n) for n in names if n in schema.names])
