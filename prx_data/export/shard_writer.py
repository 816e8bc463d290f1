"""Write samples as MDS shards straight into the MDS root, under run-scoped names, from any node.

One call is one writer (the driver, or one of ``write_workers`` Ray tasks). Each bucket's
``MdsShardWriter`` (``export.mds_format``: streaming's MDS bytes without streaming's start-up,
which loads torch and transformers) fills a folder in this process's own temp dir (the node's
disk, never a path the driver chose); every shard is moved to ``<root>/<tier>/<HxW>/<source>/<run>.<tag>.shard.NNNNN.mds``
as soon as it is closed, so the local copy never holds more than one shard per open bucket.
Nothing written here is visible to readers: they resolve ``index.json``, which only the commit
(``export.commit``) writes. What comes back (``WrittenShards``) is small and picklable: the
shards' index entries, which the driver publishes, and the lineage unless a sink took it shard
by shard as each shard closed (the export stage spills it).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
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
    lineage: pa.Table = field(default_factory=LINEAGE_SCHEMA.empty_table)  # empty when sunk
    lineage_rows: int = 0
    bytes_written: int = 0

    def sample_counts(self) -> dict[BucketRef, int]:
        return {ref: sum(int(s["samples"]) for s in shards) for ref, shards in self.shards.items()}


class _BucketWriter:
    """One open shard writer whose closed shards are moved to the root as they appear, each
    handing its lineage to ``on_lineage`` as it closes: only the ids of samples not yet in a
    closed shard are held, never the bucket's."""

    def __init__(
        self,
        ref: BucketRef,
        local: str,
        dest: Location,
        source: str,
        run_id: str,
        tag: str,
        config: MdsWriterConfig,
        on_lineage: Callable[[pa.Table], None],
    ) -> None:
        self.ref, self.local, self.dest, self.source, self.run_id, self.tag = ref, local, dest, source, run_id, tag
        # Uncompressed: JPEG is already compressed.
        self.writer = MdsShardWriter(local, config.columns(), hashes=config.hashes, size_limit=config.size_limit)
        self.on_lineage = on_lineage
        self.pending: list[str] = []  # ids written since the last closed shard, in order
        self.moved = 0  # shards already moved to the root
        self.bytes = 0

    @property
    def buffered(self) -> int:
        return self.writer.buffered

    def write(self, row: dict[str, Any]) -> None:
        self.writer.write(row)
        self.pending.append(row["sample_id"])
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
            samples = int(info["samples"])
            if samples > len(self.pending):
                raise RuntimeError(f"{self.ref.rel}/{self.source}: a shard of {samples} samples closed after {len(self.pending)} writes")
            # Writer order is index order: the shard holds the oldest pending ids.
            ids, self.pending = self.pending[:samples], self.pending[samples:]
            name = shard_object_name(self.run_id, self.tag, info["raw_data"]["basename"])
            self.on_lineage(shard_lineage(self.ref, self.source, name, ids))
            self.moved += 1

    def finish(self) -> list[dict]:
        self.writer.finish()
        self._move_closed()
        if self.pending:
            raise RuntimeError(f"{self.ref.rel}/{self.source}: {len(self.pending)} samples written but in no shard")
        shards = []
        for info in self.writer.shards:
            info = {**info}
            for key in SHARD_KEYS:
                if info.get(key):
                    info[key] = {**info[key], "basename": shard_object_name(self.run_id, self.tag, info[key]["basename"])}
            shards.append(info)
        return shards


def shard_lineage(ref: BucketRef, source: str, shard_basename: str, sample_ids: list[str]) -> pa.Table:
    """LINEAGE_SCHEMA rows of one shard: its samples in index order."""
    n = len(sample_ids)
    return pa.table(
        {
            "sample_id": pa.array(sample_ids, pa.string()),
            "source": pa.array([source] * n, pa.string()),
            "tier": pa.array(np.full(n, ref.tier, np.int32)),
            "bucket": pa.array([ref.bucket] * n, pa.string()),
            "shard": pa.array([f"{ref.rel}/{source}/{shard_basename}"] * n, pa.string()),
            "index_in_shard": pa.array(np.arange(n, dtype=np.int64)),
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
    lineage_sink: Callable[[pa.Table], None] | None = None,
) -> WrittenShards:
    """Write ``samples`` (each with ``tier, height, width`` of its bucket) as unpublished shards.

    The lineage (LINEAGE_SCHEMA, a row per sample) goes to ``lineage_sink`` shard by shard as
    each shard closes, when given (the returned ``lineage`` is then empty and ``lineage_rows``
    counts it); otherwise it is returned, bucket by bucket.

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
    kept: dict[BucketRef, list[pa.Table]] = {}
    out = WrittenShards(source=source, run_id=run_id, tag=tag)

    def on_lineage(ref: BucketRef, table: pa.Table) -> None:
        out.lineage_rows += table.num_rows
        if lineage_sink is not None:
            lineage_sink(table)
        else:
            kept.setdefault(ref, []).append(table)

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
                    writer = writers[ref] = _BucketWriter(
                        ref, staging, dest, source, run_id, tag, config, functools.partial(on_lineage, ref)
                    )
                before = writer.buffered
                writer.write(to_row(sample, source, config))
                buffered += writer.buffered - before
                if buffered > config.max_buffered_bytes:
                    fullest = max(writers.values(), key=lambda w: w.buffered)
                    buffered -= fullest.buffered
                    fullest.flush_early()
            for ref in sorted(writers):
                out.shards[ref] = writers[ref].finish()
                out.bytes_written += writers[ref].bytes
        finally:
            shutil.rmtree(local, ignore_errors=True)
    tables = [table for ref in sorted(kept) for table in kept[ref]]
    if tables:
        out.lineage = pa.concat_tables(tables)
    return out
