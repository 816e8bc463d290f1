"""Dedup over a corpus larger than memory: spill the dedup records to partitions on local disk,
then decide each partition alone with ``dedup.find_duplicates``.

A partition is safe when every duplicate group lies inside one partition, so deciding it alone
gives the same rows as deciding the whole corpus:

* exact dedup (``radius == 0``): a group shares its aspect-ratio key, its degenerate flag and its
  fingerprint (the phash, or ``image_sha256`` for a degenerate row). The partition is a function
  of the fingerprint alone (the phash's top bits, the sha's leading bytes), so copies across
  sources, tiers and aspect-ratio keys never straddle two partitions, however many there are.
* near dedup (``radius > 0``): clusters are transitive (a~b, b~c puts a and c together even when
  they differ in more than ``radius`` bits), so no cut of the hash space is exact. Clusters never
  cross an aspect-ratio key (``hash_index.cluster_ids(groups=ar)``), so the partition is that key:
  memory is bounded by the largest aspect-ratio key, not by a fixed row count.

Peak memory is one partition plus one input batch; the spill is Arrow IPC under ``scratch_dir``
(removed on return). The result equals ``find_duplicates`` on the concatenated input, row order
included (a stable sort on the keys that order its output).
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.spill import PartitionFiles
from prx_data.curation.dedup import DedupConfig, ar_keys, find_duplicates

# About 100 bytes a record in memory while a partition is decided: 2 M rows stay near 200 MB.
DEFAULT_PARTITION_ROWS = 2_000_000
# Each partition holds one open spill file while the input streams: stay far below `ulimit -n`.
MAX_PARTITION_BITS = 8


def partition_bits(total_rows: int, max_partition_rows: int) -> int:
    """Bits of fingerprint that split ``total_rows`` into partitions of about ``max_partition_rows``."""
    if max_partition_rows < 1:
        raise ValueError(f"max_partition_rows must be at least 1, got {max_partition_rows}")
    if total_rows <= max_partition_rows:
        return 0
    return min(MAX_PARTITION_BITS, math.ceil(math.log2(total_rows / max_partition_rows)))


def _degenerate(table: pa.Table) -> np.ndarray:
    if "phash_degenerate" not in table.column_names:
        return np.zeros(table.num_rows, bool)
    return pc.fill_null(table["phash_degenerate"].cast(pa.bool_()), False).to_numpy(zero_copy_only=False)


def _fingerprint_partitions(table: pa.Table, bits: int) -> np.ndarray:
    """Top ``bits`` of the phash; of the sha's first 8 bytes for a degenerate row."""
    if bits == 0:
        return np.zeros(table.num_rows, np.int64)
    shift = np.uint64(64 - bits)
    phash = pc.fill_null(table["phash"], 0).to_numpy(zero_copy_only=False).astype(np.int64).view(np.uint64)
    part = (phash >> shift).astype(np.int64)
    degenerate = _degenerate(table)
    if degenerate.any() and "image_sha256" in table.column_names:
        sha = pc.fill_null(table["image_sha256"].cast(pa.string()), "")
        head = pc.utf8_rpad(pc.utf8_slice_codeunits(sha, 0, 8), 8, "0").cast(pa.binary())
        lead = np.frombuffer(_fixed8(head), dtype=">u8").astype(np.uint64)
        part[degenerate] = (lead[degenerate] >> shift).astype(np.int64)
    return part


def _fixed8(column: pa.ChunkedArray | pa.Array) -> bytes:
    # Every value is exactly 8 bytes (padded above), so the data buffer is the packed values.
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    fixed = array.cast(pa.binary(8))
    return fixed.buffers()[1].to_pybytes()[fixed.offset * 8 : (fixed.offset + len(fixed)) * 8]


def spilled_duplicates(
    batches: Iterable[pa.Table],
    config: DedupConfig,
    *,
    total_rows: int,
    columns: list[str],
    max_partition_rows: int = DEFAULT_PARTITION_ROWS,
    scratch_dir: str | None = None,
    sink: Callable[[pa.Table], None] | None = None,
) -> pa.Table:
    """``find_duplicates`` over the concatenation of ``batches``, one partition in memory at a time.

    With ``sink``, each partition's duplicates go to it as they are found (in no particular
    order) and an empty table is returned; without, they are returned together, in the order
    ``find_duplicates`` gives on the whole input.

    ``total_rows`` (an upper bound is fine) sizes the exact partitions; ``columns`` are the input
    columns kept in the result (plus ``kept_sample_id`` and ``reason``). Each batch needs what
    ``find_duplicates`` needs. ``sample_id`` uniqueness is checked within each partition, which
    holds every row a duplicate group could pair it with.
    """
    bits = 0 if config.radius else partition_bits(total_rows, max_partition_rows)
    results: list[pa.Table] = []
    with tempfile.TemporaryDirectory(prefix="prx-dedup-", dir=scratch_dir) as folder:
        spill = PartitionFiles(folder)
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                ar = ar_keys(batch, config)  # validates shapes before anything is decided
                parts = ar if config.radius else _fingerprint_partitions(batch, bits)
                if "ar_index" in batch.column_names:
                    batch = batch.drop_columns(["ar_index"])
                spill.split(batch.append_column("ar_index", pa.array(ar, pa.int64())), parts)
        finally:
            parts_written = spill.close()
        for part in parts_written:
            table = spill.read(part)
            dups = find_duplicates(table, config)
            keys = [c for c in ("ar_index", "phash", "phash_degenerate", "image_sha256") if c in dups.column_names and c not in columns]
            if sink is not None:
                sink(dups.select([*columns, "kept_sample_id", "reason"]))
            else:
                results.append(dups.select([*columns, "kept_sample_id", "reason", *keys]))
            del table, dups
    if not results:
        schema = pa.schema(
            [pa.field(c, pa.string()) for c in columns] + [pa.field("kept_sample_id", pa.string()), pa.field("reason", pa.string())]
        )
        return schema.empty_table()
    found = pa.concat_tables(results)
    if not config.radius:
        found = found.take(_output_order(found))
    return found.select([*columns, "kept_sample_id", "reason"])


def _output_order(found: pa.Table) -> pa.Array:
    """find_duplicates' order (ar key, degenerate, fingerprint, rank in group) across partitions:
    a group's rows keep their partition order, and a stable sort on the first three restores
    the rest (a degenerate row's fingerprint is the order of its sha)."""
    degenerate = pa.array(_degenerate(found))
    sha = found["image_sha256"].cast(pa.string()) if "image_sha256" in found.column_names else pa.nulls(found.num_rows, pa.string())
    keys = pa.table(
        {
            "ar": found["ar_index"],
            "dg": degenerate,
            "ph": pc.if_else(degenerate, 0, pc.fill_null(found["phash"], 0).cast(pa.int64())),
            "sha": pc.if_else(degenerate, pc.fill_null(sha, ""), ""),
        }
    )
    return pc.sort_indices(keys, sort_keys=[("ar", "ascending"), ("dg", "ascending"), ("ph", "ascending"), ("sha", "ascending")])


__all__ = ["DEFAULT_PARTITION_ROWS", "partition_bits", "spilled_duplicates"]
