"""Write samples as MDS shards straight into the MDS root, under run-scoped names, from any node.

One call is one writer (the driver, or one of ``write_workers`` Ray tasks). Each bucket's
``MdsShardWriter`` (``export.mds_format``: streaming's MDS bytes without streaming's start-up,
which loads torch and transformers) fills a folder in this process's own temp dir (the node's
disk, never a path the driver chose); every shard is moved to ``<root>/<tier>/<HxW>/<source>/<run>.<tag>.shard.NNNNN.mds``
as soon as it is closed, so the local copy never holds more than one shard per open bucket.
Nothing written here is visible to readers: they resolve ``index.json``, which only the commit
(``export.commit``) writes. What comes back (``WrittenShards``) is small and picklable: the
shards' index entries and the lineage, which the driver publishes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from prx_data.core.storage import Location, locate, upload_file
from prx_data.export.mds_format import MdsShardWriter
from prx_data.export.mds_rows import LINEAGE_SCHEMA, MdsWriterConfig, to_row
from prx_data.export.tree import SHARD_KEYS, BucketRef, check_source


def shard_object_name(run_id: str, tag: str, basename: str) -> str:
    """'shard.00000.mds' of run R, writer p1 -> 'R.p1.shard.00000.mds'. The run id comes first
    (garbage collection and recovery read it back), the tag keeps parallel writers apart."""
    return f"{run_id}.{tag}.{basename}"


@dataclass
class WrittenShards:
    """Shards one writer put under the root; unpublished until a commit names them."""

    source: str
    run_id: str
    tag: str
    shards: dict[BucketRef, list[dict]] = field(default_factory=dict)  # index entries, writer order
    lineage: pa.Table = field(default_factory=LINEAGE_SCHEMA.empty_table)
    bytes_written: int = 0

    def sample_counts(self) -> dict[BucketRef, int]:
        return {ref: sum(int(s["samples"]) for s in shards) for ref, shards in self.shards.items()}


class _BucketWriter:
    """One open shard writer whose closed shards are moved to the root as they appear."""

    def __init__(self, ref: BucketRef, local: str, dest: Location, run_id: str, tag: str, config: MdsWriterConfig) -> None:
        self.ref, self.local, self.dest, self.run_id, self.tag = ref, local, dest, run_id, tag
        # Uncompressed: JPEG is already compressed.
        self.writer = MdsShardWriter(local, config.columns(), hashes=config.hashes, size_limit=config.size_limit)
        self.sample_ids: list[str] = []
        self.moved = 0  # shards already moved to the root
        self.bytes = 0

    @property
    def buffered(self) -> int:
        return self.writer.buffered

    def write(self, row: dict[str, Any]) -> None:
        self.writer.write(row)
        self.sample_ids.append(row["sample_id"])
        self.bytes += len(row["image"])
        self._move_closed()

    def flush_early(self) -> None:
        self.writer.flush_shard()
        self._move_closed()

    def _move_closed(self) -> None:
        for info in self.writer.shards[self.moved :]:
            for key in SHARD_KEYS:
                if info.get(key):
                    path = os.path.join(self.local, info[key]["basename"])
                    upload_file(path, self.dest.child(shard_object_name(self.run_id, self.tag, info[key]["basename"])))
                    os.remove(path)
            self.moved += 1

    def finish(self) -> list[dict]:
        self.writer.finish()
        self._move_closed()
        shards = []
        for info in self.writer.shards:
            info = {**info}
            for key in SHARD_KEYS:
                if info.get(key):
                    info[key] = {**info[key], "basename": shard_object_name(self.run_id, self.tag, info[key]["basename"])}
            shards.append(info)
        return shards


def lineage_for_bucket(ref: BucketRef, source: str, shards: list[dict], sample_ids: list[str]) -> pa.Table:
    """``shards``: the index entries of the samples written, in writer order."""
    counts = np.array([shard["samples"] for shard in shards], dtype=np.int64)
    if int(counts.sum()) != len(sample_ids):
        raise RuntimeError(f"{ref.rel}/{source}: index has {int(counts.sum())} samples, wrote {len(sample_ids)}")
    prefix = f"{ref.rel}/{source}/"
    names = np.array([prefix + shard["raw_data"]["basename"] for shard in shards], dtype=object)
    # Writer order == order in the index, so index_in_shard is the position minus the start of
    # the shard the position falls in.
    shard_of = np.repeat(np.arange(len(shards)), counts)
    starts = np.cumsum(counts) - counts
    index_in_shard = np.arange(len(sample_ids), dtype=np.int64) - starts[shard_of]
    n = len(sample_ids)
    return pa.table(
        {
            "sample_id": pa.array(sample_ids, pa.string()),
            "source": pa.array([source] * n, pa.string()),
            "tier": pa.array(np.full(n, ref.tier, np.int32)),
            "bucket": pa.array([ref.bucket] * n, pa.string()),
            "shard": pa.array(names[shard_of] if n else [], pa.string()),
            "index_in_shard": pa.array(index_in_shard),
        },
        schema=LINEAGE_SCHEMA,
    )


def write_shards(
    samples: Iterable[Mapping[str, Any]],
    *,
    mds_root: str,
    source: str,
    run_id: str,
    tag: str,
    config: MdsWriterConfig | None = None,
    storage_options: dict | None = None,
    scratch_dir: str | None = None,
) -> WrittenShards:
    """Write ``samples`` (each with ``tier, height, width`` of its bucket) as unpublished shards.

    ``scratch_dir``: where this process spools the open shards (default: its own temp dir);
    up to ``config.max_buffered_bytes`` in all, plus the closed shard being moved. On failure the shards already moved stay as garbage of
    the run: the caller's run marker protects and later removes them (``export.commit``).
    """
    check_source(source)
    if "." in tag or "/" in tag:
        raise ValueError(f"writer tag {tag!r} must not contain '.' or '/'")
    config = config or MdsWriterConfig()
    root = locate(mds_root, storage_options)
    writers: dict[BucketRef, _BucketWriter] = {}
    with tempfile.TemporaryDirectory(prefix=f"prx-shards-{source}-", dir=scratch_dir) as local:
        try:
            buffered = 0
            for sample in samples:
                ref = BucketRef(int(sample["tier"]), int(sample["height"]), int(sample["width"]))
                writer = writers.get(ref)
                if writer is None:
                    dest = root.child(ref.rel, source)
                    root.fs.create_dir(dest.path, recursive=True)
                    staging = os.path.join(local, f"{ref.tier}-{ref.bucket}")
                    writer = writers[ref] = _BucketWriter(ref, staging, dest, run_id, tag, config)
                before = writer.buffered
                writer.write(to_row(sample, source, config))
                buffered += writer.buffered - before
                if buffered > config.max_buffered_bytes:
                    fullest = max(writers.values(), key=lambda w: w.buffered)
                    buffered -= fullest.buffered
                    fullest.flush_early()
            out = WrittenShards(source=source, run_id=run_id, tag=tag)
            tables = []
            for ref in sorted(writers):
                out.shards[ref] = writers[ref].finish()
                tables.append(lineage_for_bucket(ref, source, out.shards[ref], writers[ref].sample_ids))
                out.bytes_written += writers[ref].bytes
        finally:
            shutil.rmtree(local, ignore_errors=True)
    if tables:
        out.lineage = pa.concat_tables(tables)
    return out
