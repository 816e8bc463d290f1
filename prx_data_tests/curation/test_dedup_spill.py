"""Dedup spilled to partitions decides exactly what the in-memory dedup decides, row order
included, however small the partitions (issue 21 item 3)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from prx_data.curation.dedup import MAX_PARTITION_BITS, DedupConfig, find_duplicates, partition_bits, spilled_duplicates

SHAPES = [(512, 512, 512), (512, 448, 576), (1024, 1024, 1024), (1024, 896, 1152), (2048, 2048, 2048)]


def _corpus(n: int = 3000, seed: int = 0) -> pa.Table:
    """Copies across sources, tiers and shapes; degenerate rows matched by sha only; null hashes."""
    rng = np.random.default_rng(seed)
    shape = rng.integers(0, len(SHAPES), n)
    tier, height, width = (np.array([s[i] for s in SHAPES])[shape] for i in range(3))
    # Few distinct hashes spread over the whole 64-bit range: many groups straddle nothing only
    # if partitions follow the fingerprint, never the row.
    pool = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, n // 4, dtype=np.int64)
    phash = pool[rng.integers(0, len(pool), n)]
    # Near copies (1-2 bits off) for the radius case.
    near = rng.random(n) < 0.1
    phash[near] ^= np.int64(1) << rng.integers(0, 63, near.sum())
    degenerate = rng.random(n) < 0.05
    sha = np.array([f"{v:064x}" for v in rng.integers(0, 40, n)], dtype=object)
    sha[rng.random(n) < 0.01] = None
    null_hash = rng.random(n) < 0.01
    return pa.table(
        {
            "sample_id": [f"s{i:06d}" for i in rng.permutation(n)],
            "source": pa.array(rng.choice(["a", "b", "c"], n)),
            "source_priority": pa.array(rng.integers(0, 3, n), pa.int64()),
            "tier": pa.array(tier, pa.int32()),
            "height": pa.array(height, pa.int64()),
            "width": pa.array(width, pa.int64()),
            "shard": pa.array([f"s{i % 7}" for i in range(n)]),
            "index_in_shard": pa.array(np.arange(n), pa.int64()),
            "phash": pa.array(np.where(null_hash, 0, phash), pa.int64(), mask=null_hash),
            "phash_degenerate": pa.array(degenerate),
            "image_sha256": pa.array(sha, pa.string()),
        }
    )


def _batches(table: pa.Table, size: int):
    return (table.slice(start, size) for start in range(0, table.num_rows, size))


COLUMNS = ["sample_id", "source", "shard", "index_in_shard"]


@pytest.mark.parametrize("max_rows", [1, 40, 10**9])
def test_exact_dedup_in_many_partitions_equals_the_whole_corpus_at_once(tmp_path, max_rows):
    corpus = _corpus()
    expected = find_duplicates(corpus, DedupConfig()).select([*COLUMNS, "kept_sample_id", "reason"])
    assert expected.num_rows > 500 and len(set(expected["source"].to_pylist())) == 3
    got = spilled_duplicates(
        _batches(corpus, 256),
        DedupConfig(),
        total_rows=corpus.num_rows,
        columns=COLUMNS,
        max_partition_rows=max_rows,
        scratch_dir=str(tmp_path),
    )
    assert got.equals(expected)
    assert list(tmp_path.iterdir()) == []  # the spill is removed


def test_near_dedup_partitions_by_aspect_key_and_equals_the_whole_corpus(tmp_path):
    corpus = _corpus(seed=1)
    cfg = DedupConfig(radius=2)
    expected = find_duplicates(corpus, cfg).select([*COLUMNS, "kept_sample_id", "reason"])
    got = spilled_duplicates(
        _batches(corpus, 300), cfg, total_rows=corpus.num_rows, columns=COLUMNS, max_partition_rows=1, scratch_dir=str(tmp_path)
    )
    assert got.num_rows > find_duplicates(corpus).num_rows  # the near copies were found
    assert got.equals(expected)


def test_partition_sizes_and_bad_input(tmp_path):
    assert partition_bits(100, 1000) == 0
    assert partition_bits(4000, 1000) == 2
    assert partition_bits(10**12, 1) == MAX_PARTITION_BITS
    with pytest.raises(ValueError, match="max_partition_rows"):
        partition_bits(10, 0)
    bad = _corpus(50).to_pandas()
    bad.loc[3, "width"] = 5000  # 512x5000 is far outside the aspect-ratio grid
    with pytest.raises(ValueError, match="outside the aspect-ratio grid"):
        spilled_duplicates(
            [pa.Table.from_pandas(bad, preserve_index=False)], DedupConfig(), total_rows=50, columns=COLUMNS, scratch_dir=str(tmp_path)
        )
    assert list(tmp_path.iterdir()) == []
