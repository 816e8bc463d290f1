"""The one place for table schemas and the status vocabulary.

Every table refers to samples by ``sample_id`` (never Lance row addresses, which change on
compaction).
"""

from __future__ import annotations

from enum import Enum

import pyarrow as pa

# Lance stores a column with this field metadata as a blob: scans that do not select it never
# read the image bytes.
BLOB_METADATA = {"lance-encoding:blob": "true"}


class Status(str, Enum):
    """Row status in a source's raw table. Only ``ok`` rows flow downstream."""

    OK = "ok"
    INVALID_IMAGE = "invalid_image"  # not decodable, truncated, zero bytes, wrong content
    TOO_LARGE = "too_large"  # pixel limit (decompression bomb) or byte limit
    MISSING = "missing"  # local path does not exist
    DOWNLOAD_FAILED = "download_failed"  # HTTP error, timeout, bad scheme
    OPTED_OUT = "opted_out"  # X-Robots-Tag noai, or an opt-out request matched at ingest


def raw_schema(embedding_dim: int | None = None) -> pa.Schema:
    """Schema of ``raw_samples``: one Lance table per source.

    ``width``/``height`` are as displayed (EXIF orientation applied).
    """
    fields = [
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("source_key", pa.string(), nullable=False),
        pa.field("image", pa.large_binary(), metadata=BLOB_METADATA),
        pa.field("image_format", pa.string()),
        pa.field("image_sha256", pa.string()),
        pa.field("width", pa.int32()),
        pa.field("height", pa.int32()),
        pa.field("source_caption", pa.string()),
        pa.field("source_url", pa.string()),
        pa.field("license", pa.string()),
        pa.field("status", pa.string(), nullable=False),
        pa.field("error", pa.string()),
        pa.field("ingested_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
    if embedding_dim:
        fields.append(pa.field("embedding", pa.list_(pa.float32(), embedding_dim)))
    return pa.schema(fields)


# Derived columns, each group added to the source's table by the stage that owns it, each with
# the version of what made it so stale rows can be found and redone.
PHASH_COLUMNS = pa.schema(
    [
        pa.field("phash", pa.int64()),  # 64-bit hash stored as a signed int64 (bit pattern kept)
        pa.field("phash_version", pa.string()),
        pa.field("phash_error", pa.string()),
    ]
)

CAPTION_COLUMNS = pa.schema(
    [
        pa.field("caption", pa.string()),
        pa.field("caption_model", pa.string()),
        pa.field("caption_prompt_version", pa.string()),
        pa.field("caption_error", pa.string()),
    ]
)

LABEL_COLUMNS = pa.schema(
    [
        pa.field("label", pa.string()),
        pa.field("label_model", pa.string()),
        pa.field("label_version", pa.string()),
        pa.field("label_error", pa.string()),
        # The backend's confidence in ``label`` (0..1), null where it gives none (LLM backends).
        pa.field("label_score", pa.float32()),
    ]
)

LABELS = ("visual", "text", "nsfw")


# One row per sample of a source after export: where it landed, or why it was dropped.
EXPORT_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("tier", pa.int32()),
        pa.field("bucket", pa.string()),  # "<height>x<width>"
        pa.field("shard", pa.string()),  # path of the shard file relative to the MDS root
        pa.field("index_in_shard", pa.int64()),
        pa.field("phash", pa.int64()),
        pa.field("drop_reason", pa.string()),
        pa.field("export_version", pa.string()),
        pa.field("exported_at", pa.timestamp("us", tz="UTC")),
    ]
)


# Opt-outs: which samples each request covers (read by skip_lists), and the audit of requests.
OPTOUT_MATCH_SCHEMA = pa.schema(
    [
        pa.field("request_id", pa.string()),
        pa.field("sample_id", pa.string()),
        pa.field("source", pa.string()),
        pa.field("matched_by", pa.string()),
    ]
)

OPTOUT_AUDIT_SCHEMA = pa.schema(
    [
        pa.field("request_id", pa.string()),
        pa.field("fingerprint", pa.string()),
        pa.field("requester_note", pa.string()),
        pa.field("request_file", pa.string()),
        pa.field("matched_samples", pa.int64()),
        pa.field("shards_touched", pa.list_(pa.string())),
        pa.field("problems", pa.list_(pa.string())),
        pa.field("first_effective_at", pa.timestamp("us", tz="UTC")),
        pa.field("resolved_at", pa.timestamp("us", tz="UTC")),
    ]
)
