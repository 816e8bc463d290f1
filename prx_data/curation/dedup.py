"""Decide exact perceptual-hash duplicates across the exported corpus.

Two exported samples are duplicates when they sit in the same aspect-ratio bucket and their
phashes are equal. The bucket key is the aspect-ratio index, not ``HxW``: the same shape has a
different ``HxW`` in every tier, and a copy of an image at another resolution must still collide.
The bucketing module picks that index from the image's own aspect ratio, so an image and its
scaled copies share it in every tier ("each aspect-ratio bucket across resolutions").

A degenerate fingerprint (``phash_degenerate``: a flat or near-flat image, whose hash says
nothing about its content) is never compared by phash: such a row is a duplicate only of rows
with the same exact content key ``image_sha256`` (byte-identical files). Rows without the column,
or with a null in it (hashed by an older version), count as not degenerate.
Within a group the kept sample is the one with the highest tier, then the highest source
priority, then the smallest ``sample_id``; everything is a pure function of the rows (a total
order on the keys), so input order never changes the result.

The aspect-ratio key comes from, in order of preference:
  * an ``ar_index`` column (the bucketing module's index), or
  * ``height``/``width`` columns, or a ``bucket`` column ``"HxW"``: with a ``tier`` column, the
    shape's position in that tier's shape table (exact); otherwise, or for a shape that is not in
    the table (another config), the nearest of ``num_aspect_ratios`` ratios evenly spaced in
    log(width/height) over [min_aspect, max_aspect] (the bucketing recipe's grid). That
    tolerance is half a grid step in log space (~6 % for 13 ratios over 0.5..2.0), more than
    the <=3 % a shape moves when its sides are rounded to multiples of 16. Shapes farther than
    that outside the range are rejected.

Over a corpus larger than memory (``spilled_duplicates``): spill the dedup records to partitions
on local disk (``core.spill``), then decide each partition alone with ``find_duplicates``.

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
from pydantic import BaseModel, Field

from prx_data.core.spill import PartitionFiles
from prx_data.imaging.buckets import BucketConfig, shape_index
from prx_data.imaging.hash_index import MAX_RADIUS, cluster_ids

DEDUP_REASON = "dedup"


class DedupConfig(BaseModel):
    num_aspect_ratios: int = Field(13, ge=1)
    min_aspect: float = Field(0.5, gt=0, description="Smallest width/height of the bucket grid.")
    max_aspect: float = Field(2.0, gt=0, description="Largest width/height of the bucket grid.")
    multiple: int = Field(16, ge=1, description="Shape sides are multiples of this (bucketing).")
    # Near duplicates: phashes within this Hamming distance (transitively) form one group.
    # 0 is PRX's exact rule; see docs/dedup.md for how to choose it.
    radius: int = Field(0, ge=0, le=MAX_RADIUS, description="Hamming radius k of a duplicate.")


def aspect_ratio_index(height: np.ndarray, width: np.ndarray, config: DedupConfig | None = None) -> np.ndarray:
    """Index of the nearest grid ratio (log-space) for each shape."""
    config = config or DedupConfig()
    log_ratio = np.log(np.asarray(width, np.float64) / np.asarray(height, np.float64))
    lo, hi = np.log(config.min_aspect), np.log(config.max_aspect)
    n = config.num_aspect_ratios
    if n == 1:
        return np.zeros(len(log_ratio), np.int64)
    step = (hi - lo) / (n - 1)
    position = (log_ratio - lo) / step
    index = np.rint(position).astype(np.int64)
    bad = (index < 0) | (index >= n)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"shape {int(np.asarray(height)[first])}x{int(np.asarray(width)[first])} is outside the "
            f"aspect-ratio grid [{config.min_aspect}, {config.max_aspect}]"
        )
    return index


def _table_index(tier: int, height: int, width: int, config: DedupConfig) -> int | None:

    try:
        cfg = BucketConfig(
            tiers=(tier,),
            ar_min=config.min_aspect,
            ar_max=config.max_aspect,
            shapes_per_tier=config.num_aspect_ratios,
            multiple=config.multiple,
        )
    except ValueError:  # a tier this grid cannot hold: not one of our shapes
        return None
    return shape_index(tier, height, width, cfg)


def ar_keys(table: pa.Table, config: DedupConfig) -> np.ndarray:
    """Aspect-ratio key of every row (see the module doc for the columns it reads)."""
    names = set(table.column_names)
    if "ar_index" in names:
        return table["ar_index"].to_numpy(zero_copy_only=False).astype(np.int64)
    if {"height", "width"} <= names:
        height = table["height"].to_numpy(zero_copy_only=False)
        width = table["width"].to_numpy(zero_copy_only=False)
    elif "bucket" in names:
        parts = pc.split_pattern(table["bucket"], "x")
        height = pc.list_element(parts, 0).cast(pa.int64()).to_numpy(zero_copy_only=False)
        width = pc.list_element(parts, 1).cast(pa.int64()).to_numpy(zero_copy_only=False)
    else:
        raise ValueError("need an 'ar_index' column, 'height'/'width' columns or a 'bucket' column")
    height = np.asarray(height, np.int64)
    width = np.asarray(width, np.int64)
    if "tier" not in names:
        return aspect_ratio_index(height, width, config)
    tier = _int_column(table, "tier")
    keys = np.empty(len(tier), np.int64)
    unknown = np.zeros(len(tier), bool)
    # Few distinct shapes in any corpus: one table lookup per distinct (tier, shape).
    shapes, inverse = np.unique(np.stack([tier, height, width], axis=1), axis=0, return_inverse=True)
    for code, (t, h, w) in enumerate(shapes.tolist()):
        index = _table_index(t, h, w, config)
        rows = inverse.reshape(-1) == code
        if index is None:
            unknown |= rows
        else:
            keys[rows] = index
    if unknown.any():
        keys[unknown] = aspect_ratio_index(height[unknown], width[unknown], config)
    return keys


def _content_keys(table: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """(degenerate flag, integer content key) per row.

    Non-degenerate rows are keyed by their phash, degenerate ones by the dense rank of their
    ``image_sha256`` (-1 when it is missing: never a duplicate); the flag keeps the two key
    spaces apart.
    """
    n = table.num_rows
    if "phash_degenerate" not in table.column_names:
        return np.zeros(n, bool), pc.fill_null(table["phash"], 0).to_numpy(zero_copy_only=False).astype(np.int64)
    degenerate = pc.fill_null(table["phash_degenerate"].cast(pa.bool_()), False).to_numpy(zero_copy_only=False)
    keys = pc.fill_null(table["phash"], 0).to_numpy(zero_copy_only=False).astype(np.int64)
    if degenerate.any():
        keys = keys.copy()
        if "image_sha256" in table.column_names:
            sha = table["image_sha256"].cast(pa.string())
            rank = pc.rank(pc.fill_null(sha, ""), sort_keys="ascending", tiebreaker="dense").to_numpy().astype(np.int64)
            rank[~pc.is_valid(sha).to_numpy(zero_copy_only=False)] = -1
        else:
            rank = np.full(n, -1, np.int64)
        keys[degenerate] = rank[degenerate]
    return degenerate, keys


def _int_column(table: pa.Table, name: str, default: int = 0) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, default, np.int64)
    return pc.fill_null(table[name], default).to_numpy(zero_copy_only=False).astype(np.int64)


def find_duplicates(table: pa.Table, config: DedupConfig | None = None) -> pa.Table:
    """Rows of ``table`` that are duplicates, with ``kept_sample_id`` and ``reason='dedup'``.

    Needs ``sample_id`` (unique), ``phash`` (int64; null rows never match), ``tier``, an
    aspect-ratio key (see module doc); ``source_priority`` is optional (0), and so are
    ``phash_degenerate`` and ``image_sha256`` (degenerate rows match byte-identical rows only).
    Extra columns, such as ``source``, ``shard`` and ``index_in_shard``, are carried through, so
    the result can feed ``skiplist.build_skiplists`` directly. Output is sorted by (ar key,
    fingerprint, rank in group).
    """
    config = config or DedupConfig()
    usable = pc.is_valid(table["phash"])
    if "phash_degenerate" in table.column_names:
        degenerate_rows = pc.fill_null(table["phash_degenerate"].cast(pa.bool_()), False)
        has_sha = pc.is_valid(table["image_sha256"]) if "image_sha256" in table.column_names else pa.repeat(False, table.num_rows)
        # A degenerate row needs its content key, not its phash.
        usable = pc.if_else(degenerate_rows, has_sha, usable)
    table = table.filter(usable)
    n = table.num_rows
    out_schema_extra = [pa.field("kept_sample_id", pa.string()), pa.field("reason", pa.string())]
    if n == 0:
        return pa.schema(list(table.schema) + out_schema_extra).empty_table()

    ar = ar_keys(table, config)
    degenerate, phash = _content_keys(table)
    if config.radius:
        # Each hash stands for its near-duplicate cluster: the exact grouping below then groups
        # clusters. Degenerate rows are keyed by content, never clustered by phash.
        perceptual = np.flatnonzero(~degenerate)
        hashes = phash[perceptual]
        phash = phash.copy()
        phash[perceptual] = hashes[cluster_ids(hashes, config.radius, groups=ar[perceptual])]
    tier = _int_column(table, "tier")
    priority = _int_column(table, "source_priority")
    # Dense rank of the string id turns the tie-break into an integer key for lexsort.
    sid_rank = pc.rank(table["sample_id"], sort_keys="ascending", tiebreaker="dense").to_numpy().astype(np.int64)
    if sid_rank.max() != n:  # dense ranks reach n only when all ids differ
        raise ValueError("sample_id must be unique in the dedup input")
    # lexsort: last key is primary.
    order = np.lexsort((sid_rank, -priority, -tier, phash, degenerate, ar))
    ar_s, ph_s, dg_s = ar[order], phash[order], degenerate[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = (ar_s[1:] != ar_s[:-1]) | (ph_s[1:] != ph_s[:-1]) | (dg_s[1:] != dg_s[:-1])
    group_first = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    dup_pos = np.flatnonzero(~starts)
    dup_rows = order[dup_pos]
    kept_rows = order[group_first[dup_pos]]
    result = table.take(pa.array(dup_rows))
    kept = table["sample_id"].take(pa.array(kept_rows))
    result = result.append_column(out_schema_extra[0], kept)
    return result.append_column(out_schema_extra[1], pa.array([DEDUP_REASON] * len(dup_rows), pa.string()))


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
