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
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, Field

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
