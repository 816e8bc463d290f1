"""Write one source partition's encoded samples into the MDS tree, all or nothing.

Layout: ``<mds root>/<tier>/<height>x<width>/<source>/<run>.<tag>.shard.NNNNN.mds`` +
``index.json``, on a local folder or an object store alike. Writing lives in
``export.shard_writer`` (any node, straight into the root), publishing in ``export.commit``
(the one commit protocol: readers see the previous export or the new one, never half).
``write_partition`` is the single-writer path: begin, write, publish, and on failure delete
what the run wrote. Parallel writers (``stages.export_stage``) call the three steps themselves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from prx_data.export import commit
from prx_data.export.commit import new_run_id, recover, run_of_object
from prx_data.export.mds_rows import BASE_COLUMNS, JPEG_MAGIC, LINEAGE_SCHEMA, MdsWriterConfig
from prx_data.export.shard_writer import WrittenShards, write_shards
from prx_data.export.tree import COMMITS_DIR, BucketRef, check_source, running_marker_name

logger = logging.getLogger(__name__)

__all__ = [
    "BASE_COLUMNS",
    "COMMITS_DIR",
    "JPEG_MAGIC",
    "LINEAGE_SCHEMA",
    "MdsWriterConfig",
    "PartitionExport",
    "commit_parts",
    "new_run_id",
    "recover",
    "run_of_object",
    "running_marker_name",
    "write_partition",
]


@dataclass
class PartitionExport:
    """What one export of a partition published."""

    source: str
    run_id: str
    lineage: pa.Table  # LINEAGE_SCHEMA, one row per written sample
    buckets: list[BucketRef]  # buckets the source now has
    removed_buckets: list[BucketRef]  # buckets the source had before and no longer has
    samples_per_bucket: dict[str, int] = field(default_factory=dict)  # "tier/HxW" -> count written
    bytes_written: int = 0
    seconds: float = 0.0


def commit_parts(
    parts: list[WrittenShards],
    *,
    mds_root: str,
    source: str,
    run_id: str,
    storage_options: dict | None = None,
    rewrite: set[BucketRef] | None = None,
    allow_empty: bool = False,
    started: float | None = None,
) -> PartitionExport:
    """Publish what the run's writers wrote (``commit.publish``) and describe the result."""
    published = commit.publish(mds_root, source, run_id, parts, storage_options=storage_options, rewrite=rewrite, allow_empty=allow_empty)
    counts: dict[str, int] = {}
    for part in parts:
        for ref, n in part.sample_counts().items():
            counts[ref.rel] = counts.get(ref.rel, 0) + n
    tables = [part.lineage for part in parts if part.lineage.num_rows]
    return PartitionExport(
        source=source,
        run_id=run_id,
        lineage=pa.concat_tables(tables) if tables else LINEAGE_SCHEMA.empty_table(),
        buckets=published.buckets,
        removed_buckets=published.removed,
        samples_per_bucket=dict(sorted(counts.items())),
        bytes_written=sum(part.bytes_written for part in parts),
        seconds=time.perf_counter() - started if started is not None else 0.0,
    )


def write_partition(
    samples: Iterable[Mapping[str, Any]],
    *,
    mds_root: str,
    source: str,
    storage_options: dict | None = None,
    config: MdsWriterConfig | None = None,
    run_id: str | None = None,
    allow_empty: bool = False,
    scratch_dir: str | None = None,
    rewrite: set[BucketRef] | None = None,
) -> PartitionExport:
    """Write ``samples`` as the source's export under ``mds_root`` (a folder or ``s3://``...).

    Each sample carries ``tier, height, width`` (the bucket shape it was encoded to), ``image``
    (JPEG bytes, stored unchanged), ``caption, sample_id, original_width, original_height`` and
    optionally the configured extra columns. Input may interleave buckets. ``scratch_dir``: where
    open shards are buffered before they move to the root (one shard per open bucket).

    ``rewrite`` switches to incremental mode: the samples given are appended to the source's
    current shards, except in the buckets listed in ``rewrite``, whose shards are replaced by
    what is written (the bucket is removed when nothing is). Buckets neither written nor listed
    are left untouched, and a run with nothing to write and nothing to rewrite commits nothing.

    An empty input removes the source from the tree, so it needs ``allow_empty=True``: an
    upstream bug that yields nothing must not silently wipe a good export.
    """
    check_source(source)
    run_id = run_id or new_run_id()
    started = time.perf_counter()
    commit.begin(mds_root, source, run_id, storage_options)
    try:
        part = write_shards(
            samples,
            mds_root=mds_root,
            source=source,
            run_id=run_id,
            tag="p0",
            config=config,
            storage_options=storage_options,
            scratch_dir=scratch_dir,
        )
        return commit_parts(
            [part],
            mds_root=mds_root,
            source=source,
            run_id=run_id,
            storage_options=storage_options,
            rewrite=rewrite,
            allow_empty=allow_empty,
            started=started,
        )
    except BaseException:
        commit.abandon(mds_root, source, run_id, storage_options)
        raise
