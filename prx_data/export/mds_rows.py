"""What an MDS sample of the export holds: the writer's settings and the row it writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, Field

from prx_data.core.schema import EXPORT_SCHEMA

# `bytes`, not MDS `jpeg`: the `jpeg` encoding re-encodes at PIL's default quality 75 (STACK.md).
# `bytes` stores what it is given, and any StreamingDataset can read it without a custom codec.
BASE_COLUMNS: dict[str, str] = {
    "image": "bytes",
    "caption": "str",
    "sample_id": "str",
    "source": "str",
    "original_width": "int32",
    "original_height": "int32",
}
JPEG_MAGIC = b"\xff\xd8\xff"

# Where each written sample landed: the export table's placement columns.
LINEAGE_SCHEMA = pa.schema([EXPORT_SCHEMA.field(name) for name in ("sample_id", "source", "tier", "bucket", "shard", "index_in_shard")])


class MdsWriterConfig(BaseModel):
    size_limit: int = Field(128 * 1024 * 1024, gt=0, description="Target shard size in bytes.")
    max_buffered_bytes: int = Field(
        1024 * 1024 * 1024,
        gt=0,
        description="Cap on the bytes of all open shards together (spooled on the local scratch "
        "disk, not held in memory); when passed, the fullest writer flushes an early (smaller) "
        "shard. Bounds scratch space for input that feeds many buckets at once.",
    )
    extra_columns: tuple[str, ...] = Field(
        ("label", "caption_model"),
        description="Optional str columns; a missing or None value is stored as ''.",
    )
    hashes: tuple[str, ...] = Field((), description="MDS shard hashes, e.g. ('xxh64',).")
    require_jpeg: bool = Field(True, description="Reject images that do not start with a JPEG SOI.")

    def columns(self) -> dict[str, str]:
        columns = dict(BASE_COLUMNS)
        for name in self.extra_columns:
            if name in columns:
                raise ValueError(f"extra column {name!r} clashes with a base column")
            columns[name] = "str"
        return columns


def to_row(sample: Mapping[str, Any], source: str, config: MdsWriterConfig) -> dict[str, Any]:
    image = sample["image"]
    if not isinstance(image, bytes):
        image = bytes(image)  # bytearray / memoryview / numpy buffer
    if config.require_jpeg and not image.startswith(JPEG_MAGIC):
        raise ValueError(f"sample {sample.get('sample_id')!r}: image is not JPEG-encoded bytes")
    if sample.get("source", source) != source:
        raise ValueError(f"sample {sample.get('sample_id')!r} has source {sample['source']!r}, partition is {source!r}")
    row: dict[str, Any] = {
        "image": image,
        "caption": sample.get("caption") or "",
        "sample_id": str(sample["sample_id"]),
        "source": source,
        "original_width": int(sample["original_width"]),
        "original_height": int(sample["original_height"]),
    }
    for name in config.extra_columns:
        value = sample.get(name)
        row[name] = "" if value is None else str(value)
    return row
