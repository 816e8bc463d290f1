"""Decide exact perceptual-hash duplicates across the exported corpus.

Two exported samples are duplicates when they sit in the same aspect-ratio bucket and their
phashes are equal. The bucket key is the aspect-ratio index, not ``HxW``: the same shape has a
different ``HxW`` in every tier, and a copy of an image at another resolution must still collide.
Within a group the kept sample is the one with the highest tier, then the highest source
priority, then the smallest ``sample_id``; everything is a pure function of the rows (a total
order on the keys), so input order never changes the result.

The aspect-ratio key comes from, in order of preference:
  * an ``ar_index`` column (the bucketing module's index of the shape), or
  * ``height``/``width`` columns, or a ``bucket`` column ``"HxW"``: the key is the nearest of
    ``num_aspect_ratios`` ratios evenly spaced in log(width/height) over [min_aspect, max_aspect]
    (the bucketing recipe's grid). The tolerance is therefore half a grid step in log space
    (~6 % for 13 ratios over 0.5..2.0), far more than the <=3 % a shape moves when its sides are
    rounded to multiples of 16. Shapes farther than that outside the range are rejected.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, Field

from prx_data.imaging.hash_index import MAX_RADIUS, cluster_ids

DEDUP_REASON = "dedup"


class DedupConfig(BaseModel):
    num_aspect_ratios: int = Field(13, ge=1)
    min_aspect: float = Field(0.5, gt=0, description="Smallest width/height of the bucket grid.")
    max_aspect: float = Field(2.0, gt=0, description="Largest width/height of the bucket grid.")
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


def _ar_keys(table: pa.Table, config: DedupConfig) -> np.ndarray:
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
    return aspect_ratio_index(height, width, config)


def _int_column(table: pa.Table, name: str, default: int = 0) -> np.ndarray:
    if name not in table.column_names:
        return np.full(table.num_rows, default, np.int64)
    return pc.fill_null(table[name], default).to_numpy(zero_copy_only=False).astype(np.int64)


def find_duplicates(table: pa.Table, config: DedupConfig | None = None) -> pa.Table:
    """Rows of ``table`` that are duplicates, with ``kept_sample_id`` and ``reason='dedup'``.

    Needs ``sample_id`` (unique), ``phash`` (int64; null rows never match), ``tier``, an
    aspect-ratio key (see module doc); ``source_priority`` is optional (0). Extra columns, such as
    ``source``, ``shard`` and ``index_in_shard``, are carried through, so the result can feed
    ``skiplist.build_skiplists`` directly. Output is sorted by (ar key, phash, rank in group).
    """
    config = config or DedupConfig()
    table = table.filter(pc.is_valid(table["phash"]))
    n = table.num_rows
    out_schema_extra = [pa.field("kept_sample_id", pa.string()), pa.field("reason", pa.string())]
    if n == 0:
        return pa.schema(list(table.schema) + out_schema_extra).empty_table()

    ar = _ar_keys(table, config)
    phash = table["phash"].to_numpy(zero_copy_only=False).astype(np.int64)
    if config.radius:
        # Each hash stands for its near-duplicate cluster: the exact grouping below then
        # groups clusters.
        phash = phash[cluster_ids(phash, config.radius, groups=ar)]
    tier = _int_column(table, "tier")
    priority = _int_column(table, "source_priority")
    # Dense rank of the string id turns the tie-break into an integer key for lexsort.
    sid_rank = pc.rank(table["sample_id"], sort_keys="ascending", tiebreaker="dense").to_numpy().astype(np.int64)
    if sid_rank.max() != n:  # dense ranks reach n only when all ids differ
        raise ValueError("sample_id must be unique in the dedup input")
    # lexsort: last key is primary.
    order = np.lexsort((sid_rank, -priority, -tier, phash, ar))
    ar_s, ph_s = ar[order], phash[order]
    starts = np.ones(n, dtype=bool)
    starts[1:] = (ar_s[1:] != ar_s[:-1]) | (ph_s[1:] != ph_s[:-1])
    group_first = np.maximum.accumulate(np.where(starts, np.arange(n), 0))
    dup_pos = np.flatnonzero(~starts)
    dup_rows = order[dup_pos]
    kept_rows = order[group_first[dup_pos]]
    result = table.take(pa.array(dup_rows))
    kept = table["sample_id"].take(pa.array(kept_rows))
    result = result.append_column(out_schema_extra[0], kept)
    return result.append_column(out_schema_extra[1], pa.array([DEDUP_REASON] * len(dup_rows), pa.string()))
