"""One item of a source as a row of its raw table, and the fingerprints change detection
compares (image hash and status, metadata digest). A run's counts are ``ingest_stats``."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime

import pyarrow as pa

from prx_data.core.ids import sample_id
from prx_data.core.schema import Status
from prx_data.core.urls import redact_text, redact_url, url_key
from prx_data.imaging.fingerprints import ingest_fingerprint
from prx_data.ingest.read.raw_item import RawItem
from prx_data.ingest.registry import RegisteredSource
from prx_data.ingest.rows.image_probe import Probe, probe_image

# Decides at ingest whether an item is covered by an opt-out request: (source, sample_id, item)
# -> the request id, or None.
OptOutMatcher = Callable[[str, str, RawItem], "str | None"]

# Raw columns that come from the source's record rather than from the image: a change here is
# applied in place, without redoing image work.
METADATA_COLUMNS = ("source_caption", "source_url", "license")


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
