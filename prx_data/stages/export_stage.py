"""The export stage: bucket, resize, encode and write a source's usable rows as MDS shards,
and record where every sample landed (or why it was dropped) in the source's exports table.

Decoding and encoding run on Ray; the MDS writer runs in the driver and commits the whole
partition at once (``export.mds_writer``), so a failed run leaves the previous export as it was.
An object-store MDS root (``s3://``) is written in a local scratch folder and published with the
same all-or-nothing promise (``write_partition_remote``: shards first, each bucket's source
index last).
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

import lance
import pyarrow as pa

from prx_data.export.mds_writer import MdsWriterConfig, write_partition, write_partition_remote
from prx_data.imaging.buckets import BUCKETING_VERSION, BucketConfig, Drop, assign
from prx_data.imaging.transform import JPEG_QUALITY, Prepared, prepare
from prx_data.schema import EXPORT_SCHEMA
from prx_data.stages.executors import make_processor
from prx_data.storage_uri import is_remote

# Bump when the resize/encode path changes in a way that changes exported bytes.
TRANSFORM_VERSION = "lanczos-cover-crop-v1"

_PREPARED_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string()),
        pa.field("jpeg", pa.large_binary()),
        pa.field("tier", pa.int32()),
        pa.field("height", pa.int32()),
        pa.field("width", pa.int32()),
        pa.field("original_width", pa.int32()),
        pa.field("original_height", pa.int32()),
        pa.field("drop_reason", pa.string()),
    ]
)


def export_version(bucket_cfg: BucketConfig) -> str:
    """Names everything that decides the exported bytes; a change marks exports stale."""
    digest = hashlib.sha256(bucket_cfg.model_dump_json().encode()).hexdigest()[:10]
    return f"{TRANSFORM_VERSION}-q{JPEG_QUALITY}-buckets-{BUCKETING_VERSION}-{digest}"


def prepare_rows(bucket_cfg_json: str, sample_ids: list[str], images: list[bytes | None], _rows: pa.Table) -> pa.Table:
    cfg = BucketConfig.model_validate_json(bucket_cfg_json)
    out = {name: [] for name in _PREPARED_SCHEMA.names}
    for sid, data in zip(sample_ids, images):
        result = prepare(data, cfg) if data is not None else Drop("invalid_image", "no image bytes")
        out["sample_id"].append(sid)
        if isinstance(result, Prepared):
            values = (result.jpeg, result.tier, result.height, result.width, result.original_width, result.original_height, None)
        else:
            values = (None, None, None, None, None, None, f"{result.reason}: {result.detail}" if result.detail else result.reason)
        for name, value in zip(_PREPARED_SCHEMA.names[1:], values):
            out[name].append(value)
    return pa.table(out, schema=_PREPARED_SCHEMA)


@dataclass
class ExportStats:
    source: str
    exported: int = 0
    dropped: Counter = field(default_factory=Counter)
    per_bucket: dict[str, int] = field(default_factory=dict)
    bytes_written: int = 0
    removed_buckets: list[str] = field(default_factory=list)
    seconds: float = 0.0
    version: str = ""

    @property
    def images_per_s(self) -> float:
        return self.exported / self.seconds if self.seconds else 0.0


def _drop_reason_code(reason: str) -> str:
    return reason.split(":", 1)[0]


def export_source(
    table_uri: str,
    source: str,
    *,
    mds_root: str,
    exports_uri: str,
    bucket_cfg: BucketConfig | None = None,
    writer_cfg: MdsWriterConfig | None = None,
    executor: Literal["ray", "local"] = "ray",
    chunk_rows: int = 32,
    require_caption: bool = True,
    storage_options: dict | None = None,
    progress=None,
    scratch_dir: str | None = None,
) -> ExportStats:
    started = time.perf_counter()
    bucket_cfg = bucket_cfg or BucketConfig()
    stats = ExportStats(source=source, version=export_version(bucket_cfg))
    ds = lance.dataset(table_uri, storage_options=storage_options)
    names = ds.schema.names
    wanted = ["sample_id", "width", "height"] + [c for c in ("caption", "phash", "label", "caption_model") if c in names]
    rows = ds.to_table(columns=wanted, filter="status = 'ok'", with_row_address=True)
    n = rows.num_rows
    drop = [None] * n
    caption = rows.column("caption").to_pylist() if "caption" in wanted else [None] * n
    widths, heights = rows.column("width").to_pylist(), rows.column("height").to_pylist()
    for i in range(n):
        if require_caption and not caption[i]:
            drop[i] = "no_caption"
            continue
        target = assign(widths[i], heights[i], bucket_cfg)
        if isinstance(target, Drop):
            drop[i] = target.reason
    todo = rows.filter(pa.array([d is None for d in drop]))
    by_id = {sid: i for i, sid in enumerate(rows.column("sample_id").to_pylist())}
    extras = {c: rows.column(c).to_pylist() for c in ("label", "caption_model") if c in wanted}

    processor = make_processor(
        functools.partial(prepare_rows, bucket_cfg.model_dump_json()), executor=executor, chunk_rows=chunk_rows
    )
    late_drops: dict[str, str] = {}

    def samples() -> Iterator[dict]:
        done = 0
        for result in processor(ds, todo.select(["sample_id", "_rowaddr"])):
            for rec in result.to_pylist():
                i = by_id[rec["sample_id"]]
                if rec["drop_reason"]:
                    late_drops[rec["sample_id"]] = rec["drop_reason"]
                    continue
                sample = {
                    "image": rec["jpeg"],
                    "tier": rec["tier"],
                    "height": rec["height"],
                    "width": rec["width"],
                    "original_width": rec["original_width"],
                    "original_height": rec["original_height"],
                    "caption": caption[i],
                    "sample_id": rec["sample_id"],
                }
                for name, values in extras.items():
                    sample[name] = values[i]
                yield sample
            done += result.num_rows
            if progress:
                progress(done, todo.num_rows)

    if is_remote(mds_root):
        export = write_partition_remote(
            samples(),
            mds_root=mds_root,
            source=source,
            storage_options=storage_options,
            config=writer_cfg,
            allow_empty=True,
            scratch_dir=scratch_dir,
        )
    else:
        export = write_partition(samples(), mds_root=mds_root, source=source, config=writer_cfg, allow_empty=True)
    for sid, reason in late_drops.items():
        drop[by_id[sid]] = reason

    _write_exports_table(exports_uri, source, export.lineage, rows, drop, stats.version, storage_options)
    stats.exported = export.lineage.num_rows
    stats.dropped = Counter(_drop_reason_code(d) for d in drop if d)
    stats.per_bucket = dict(sorted(export.samples_per_bucket.items()))
    stats.bytes_written = export.bytes_written
    stats.removed_buckets = [r.rel for r in export.removed_buckets]
    stats.seconds = time.perf_counter() - started
    return stats


def _write_exports_table(uri: str, source: str, lineage: pa.Table, rows: pa.Table, drop: list, version: str, options: dict | None) -> None:
    now = datetime.now(timezone.utc)
    phash = dict(zip(rows.column("sample_id").to_pylist(), rows.column("phash").to_pylist())) if "phash" in rows.column_names else {}
    exported = {
        "sample_id": lineage.column("sample_id").to_pylist(),
        "tier": lineage.column("tier").to_pylist(),
        "bucket": lineage.column("bucket").to_pylist(),
        "shard": lineage.column("shard").to_pylist(),
        "index_in_shard": lineage.column("index_in_shard").to_pylist(),
        "drop_reason": [None] * lineage.num_rows,
    }
    ids = rows.column("sample_id").to_pylist()
    for sid, reason in zip(ids, drop):
        if reason:
            for key, value in (("sample_id", sid), ("tier", None), ("bucket", None), ("shard", None), ("index_in_shard", None), ("drop_reason", reason)):
                exported[key].append(value)
    count = len(exported["sample_id"])
    table = pa.table(
        {
            **exported,
            "source": [source] * count,
            "phash": [phash.get(s) for s in exported["sample_id"]],
            "export_version": [version] * count,
            "exported_at": [now] * count,
        }
    ).select(EXPORT_SCHEMA.names).cast(EXPORT_SCHEMA)
    lance.write_dataset(table, uri, mode="overwrite", storage_options=options)


__all__: Iterable[str] = ["ExportStats", "export_source", "export_version", "prepare_rows"]
