"""The one place for table schemas and the status vocabulary.

Every table refers to samples by ``sample_id`` (never Lance row addresses, which change on
compaction).
"""

from __future__ import annotations

from enum import StrEnum

import pyarrow as pa

# Lance stores a column with this field metadata as a blob: scans that do not select it never
# read the image bytes.
BLOB_METADATA = {"lance-encoding:blob": "true"}


class Status(StrEnum):
    """Row status in a source's raw table. Only ``ok`` rows flow downstream."""

    OK = "ok"
    INVALID_IMAGE = "invalid_image"  # not decodable, truncated, zero bytes, wrong content
    TOO_LARGE = "too_large"  # pixel limit (decompression bomb) or byte limit
    MISSING = "missing"  # local path does not exist
    DOWNLOAD_FAILED = "download_failed"  # HTTP error, timeout, bad scheme
    OPTED_OUT = "opted_out"  # X-Robots-Tag noai, or an opt-out request matched at ingest
    UNSUPPORTED_FORMAT = "unsupported_format"  # a real format outside the spec's allow-list (EPS, HEIC...)
    OUTSIDE_ROOT = "outside_root"  # a path or symlink leading out of the source's root: never read
    UNREADABLE = "unreadable"  # a file that cannot be read: permissions, symlink loop, not a regular file
    INVALID_RECORD = "invalid_record"  # a record or sidecar with a bad value (not UTF-8, wrong type)
    REFUSED_ADDRESS = "refused_address"  # a URL resolving to a private/loopback/reserved address


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
        # The orchestrator's run that last wrote the row (new, changed or metadata-updated).
        pa.field("ingest_run_id", pa.string()),
        # HMAC-SHA256 of the original source URL under the root's key (core/urls.py): opt-out by
        # the URL an owner knows still matches, though source_url holds only the redacted form.
        pa.field("source_url_key", pa.string()),
    ]
    if embedding_dim:
        fields.append(pa.field("embedding", pa.list_(pa.float32(), embedding_dim)))
    return pa.schema(fields)


# Derived columns, each group added to the source's table by the stage that owns it, each with
# the version of what made it so stale rows can be found and redone.
PHASH_COLUMNS = pa.schema(
    [
        pa.field("phash", pa.int64()),  # 64-bit hash stored as a signed int64 (bit pattern kept)
        # True for a flat / near-flat image: its phash is no fingerprint; match it by
        # image_sha256 only (null on rows hashed by an older version: treat as False).
        pa.field("phash_degenerate", pa.bool_()),
        pa.field("phash_version", pa.string()),
        pa.field("phash_error", pa.string()),
    ]
)

# The colour space an image's embedded ICC profile declares (imaging/colour.py): srgb,
# display-p3, adobe-rgb, other:<profile description>, none (no profile), invalid-profile (one
# that does not parse or fit the image, its reason in colour_error; the image is used as sRGB).
# Null on rows not read yet (a table made before the column existed, until the next run).
COLOUR_COLUMNS = pa.schema(
    [
        pa.field("colour_space", pa.string()),
        pa.field("colour_version", pa.string()),
        pa.field("colour_error", pa.string()),
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


def input_fingerprint_field(stage: str) -> pa.Field:
    """``<stage>_input_fp``: a fingerprint of the inputs a stage's value was made from
    (``stages.column_stage``), written beside the stage's columns; a row whose inputs no longer
    match it is redone. ``caption_input_fp``: image_sha256 (+ source_caption for the ``source``
    captioner); ``label_input_fp``: the caption; ``phash_input_fp``: image_sha256."""
    return pa.field(f"{stage}_input_fp", pa.string())


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
        pa.field("export_run_id", pa.string()),  # the run that placed (or dropped) the sample
        # What the exported sample was made from, so a re-run redoes only what changed:
        # image_key names the encoded bytes (image sha256, shape, export version, writer
        # columns), meta_key the other columns (caption, label, caption model).
        pa.field("image_key", pa.string()),
        pa.field("meta_key", pa.string()),
    ]
)

# Placements an incremental export left behind in shards it kept (the sample was removed or
# changed and written anew): skip_lists excludes them with the reason "superseded".
SUPERSEDED_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("tier", pa.int32()),
        pa.field("bucket", pa.string()),
        pa.field("shard", pa.string()),
        pa.field("index_in_shard", pa.int64()),
        pa.field("superseded_at", pa.timestamp("us", tz="UTC")),
    ]
)


# Opt-outs: which samples each request covers (read by skip_lists), and the audit of requests.
# ``rule`` is ``identity`` (the request named the sample: id, key, URL, domain) or ``fingerprint``
# (its image equals, within ``distance``, a fingerprint the request recorded: ``fingerprint_of``
# names the sample or image file that fingerprint came from).
OPTOUT_MATCH_SCHEMA = pa.schema(
    [
        pa.field("request_id", pa.string()),
        pa.field("sample_id", pa.string()),
        pa.field("source", pa.string()),
        pa.field("matched_by", pa.string()),  # sample_id|source_key|url|domain|image|phash|content_key
        pa.field("rule", pa.string()),
        pa.field("distance", pa.int32()),
        pa.field("fingerprint_of", pa.string()),
    ]
)

# One fingerprint a request covers: a perceptual hash (within ``max_distance``) or, for
# degenerate images and byte-exact copies, the content key ``image_sha256``.
OPTOUT_FINGERPRINT_TYPE = pa.struct(
    [
        pa.field("phash", pa.int64()),
        pa.field("sha256", pa.string()),
        pa.field("max_distance", pa.int32()),
        pa.field("origin", pa.string()),  # "sample:<id>" or "image:<file>"
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
        pa.field("matched_identity", pa.int64()),
        pa.field("matched_fingerprint", pa.int64()),
        pa.field("named", pa.int64()),  # ids, keys, URLs, domains and image files the request names
        pa.field("unmatched", pa.list_(pa.string())),  # "<kind> <value>" for each name that matched nothing
        # Durable: every fingerprint ever recorded for this request id, kept across re-ingests that
        # drop a matched row's bytes; every skip-list build re-applies them to every source.
        pa.field("fingerprints", pa.list_(OPTOUT_FINGERPRINT_TYPE)),
        # The version in force (JSON of the request): a file that later fails to load or vanishes
        # keeps this version applied until `prx-data optout withdraw` removes it on purpose.
        pa.field("request_json", pa.string()),
        # "applied" (loaded from its file this time) or "kept: <why>" (its last applied version).
        pa.field("state", pa.string()),
    ]
)

# One row per request withdrawn on purpose (`prx-data optout withdraw`): the receipt.
OPTOUT_WITHDRAWAL_SCHEMA = pa.schema(
    [
        pa.field("request_id", pa.string()),
        pa.field("withdrawn_at", pa.timestamp("us", tz="UTC")),
        pa.field("reason", pa.string()),
        pa.field("request_file", pa.string()),
        pa.field("request_json", pa.string()),
        pa.field("matched_samples", pa.int64()),  # matched when last applied
        pa.field("first_effective_at", pa.timestamp("us", tz="UTC")),
        pa.field("files_removed", pa.list_(pa.string())),
    ]
)

# One row per request per skip-list build: which build excludes what (the requester's receipt).
OPTOUT_BUILD_SCHEMA = pa.schema(
    [
        pa.field("build_id", pa.string()),
        pa.field("built_at", pa.timestamp("us", tz="UTC")),
        pa.field("request_id", pa.string()),
        pa.field("samples_excluded", pa.int64()),
        pa.field("shards", pa.list_(pa.string())),
    ]
)
