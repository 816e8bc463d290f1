"""The multi-index near-duplicate search equals brute force, and dedup's radius uses it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prx_data.curation.dedup import DedupConfig, find_duplicates
from prx_data.imaging.hash_index import (
    HashIndex,
    as_uint64,
    auto_blocks,
    block_layout,
    brute_force_pairs,
    cluster_ids,
    near_pairs,
)


def _clustered_hashes(seed: int, n: int) -> np.ndarray:
    """Random hashes plus copies with a few flipped bits and exact repeats, so every radius
    has real matches (uniform random hashes alone are ~32 bits apart)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**63, max(1, n // 3), dtype=np.int64).view(np.uint64) * np.uint64(2) + np.uint64(1)
    out = [base]
    for _ in range(2):
        flips = rng.integers(0, 6, len(base))
        noisy = base.copy()
        for i, f in enumerate(flips):
            for bit in rng.choice(64, f, replace=False):
                noisy[i] ^= np.uint64(1) << np.uint64(bit)
        out.append(noisy)
    values = np.concatenate(out)[:n]
    return values[rng.permutation(len(values))]


def _brute_clusters(values: np.ndarray, radius: int, groups: np.ndarray) -> np.ndarray:
    parent = list(range(len(values)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, j, _ in zip(*brute_force_pairs(values, radius)):
        if groups[i] == groups[j]:
            parent[max(find(i), find(j))] = min(find(i), find(j))
    roots = np.array([find(i) for i in range(len(values))])
    # Canonical id: smallest member index (the root is the smallest by construction).
    return roots


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(0, 120), radius=st.integers(0, 10), data=st.data())
def test_pairs_equal_brute_force(seed: int, n: int, radius: int, data) -> None:
    values = _clustered_hashes(seed, n)
    blocks = data.draw(st.none() | st.integers(1, radius + 1))
    if blocks is not None and blocks < radius + 1 and radius // blocks > 3:
        blocks = None  # too many neighbours to enumerate per block: the index refuses these
    got = near_pairs(values, radius, blocks)
    want = brute_force_pairs(values, radius)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 100), radius=st.integers(0, 8), n_groups=st.integers(1, 3))
def test_clusters_equal_brute_force(seed: int, n: int, radius: int, n_groups: int) -> None:
    values = _clustered_hashes(seed, n)
    groups = np.random.default_rng(seed).integers(0, n_groups, len(values))
    np.testing.assert_array_equal(cluster_ids(values, radius, groups), _brute_clusters(values, radius, groups))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), radius=st.integers(0, 6), smaller=st.integers(0, 6))
def test_queries_at_a_smaller_radius(seed: int, radius: int, smaller: int) -> None:
    smaller = min(smaller, radius)
    values = _clustered_hashes(seed, 90)
    index = HashIndex(values[:60], radius)
    q, r, d = index.query(values[60:], smaller)
    got = sorted(zip(q.tolist(), r.tolist(), d.tolist()))
    want = [
        (qi, ri, int(np.bitwise_count(values[60 + qi] ^ values[ri])))
        for qi in range(30)
        for ri in range(60)
        if int(np.bitwise_count(values[60 + qi] ^ values[ri])) <= smaller
    ]
    assert got == sorted(want)


def test_signed_and_unsigned_forms_agree() -> None:
    signed = np.array([-1, 0, -(2**63), 2**63 - 1], np.int64)
    unsigned = as_uint64(np.array([2**64 - 1, 0, 2**63, 2**63 - 1], dtype=object))  # Python ints
    np.testing.assert_array_equal(as_uint64(signed), unsigned)
    # -1 and 2**63-1, 0 and -2**63: each pair differs in the top bit only.
    i, j, d = near_pairs(signed, 1)
    assert list(zip(i.tolist(), j.tolist(), d.tolist())) == [(0, 3, 1), (1, 2, 1)]


def test_layout_and_block_choice() -> None:
    for m in (1, 2, 3, 5, 11):
        layout = block_layout(m)
        assert sum(w for _, w in layout) == 64 and layout[0][0] == 0
    assert auto_blocks(10**6, 0) == 1
    # Blocks of about log2(n) bits: 2 blocks of 32 bits at a billion hashes.
    assert auto_blocks(10**9, 4) == 2
    with pytest.raises(ValueError, match="radius"):
        HashIndex(np.zeros(3, np.uint64), 40)
    with pytest.raises(ValueError, match="num_blocks"):
        HashIndex(np.zeros(3, np.uint64), 2, num_blocks=4)
    with pytest.raises(ValueError, match="more blocks"):
        HashIndex(np.zeros(3, np.uint64), 20, num_blocks=1)


def test_many_exact_copies_are_one_node() -> None:
    values = np.array([5] * 3000 + [4], np.int64)  # 4 is 1 bit from 5
    ids = cluster_ids(values, 1)
    assert set(ids.tolist()) == {0}
    assert len(cluster_ids(np.array([], np.int64), 3)) == 0


def _dedup_table(phashes: list[int], ar: list[int]) -> pa.Table:
    n = len(phashes)
    return pa.table(
        {
            "sample_id": [f"s{i}" for i in range(n)],
            "tier": pa.array([512] * n, pa.int32()),
            "ar_index": pa.array(ar, pa.int32()),
            "phash": pa.array(phashes, pa.int64()),
        }
    )


def test_dedup_radius() -> None:
    # s0 -- s1 is 2 bits, s1 -- s2 is 1 bit, s3 is far; s4 equals s0 in another bucket.
    table = _dedup_table([0b0000, 0b0011, 0b0111, -1, 0b0000], [3, 3, 3, 3, 4])
    assert find_duplicates(table).num_rows == 0
    r1 = find_duplicates(table, DedupConfig(radius=1))
    assert dict(zip(r1["sample_id"].to_pylist(), r1["kept_sample_id"].to_pylist())) == {"s2": "s1"}
    r2 = find_duplicates(table, DedupConfig(radius=2))
    assert dict(zip(r2["sample_id"].to_pylist(), r2["kept_sample_id"].to_pylist())) == {"s1": "s0", "s2": "s0"}
    with pytest.raises(ValueError):
        DedupConfig(radius=-1)


def test_dedup_radius_matches_brute_force_groups() -> None:
    values = _clustered_hashes(7, 300).view(np.int64)
    ar = np.random.default_rng(7).integers(0, 2, len(values))
    table = _dedup_table(values.tolist(), ar.tolist())
    for radius in (0, 2, 4):
        clusters = _brute_clusters(values.view(np.uint64), radius, ar)
        dups = find_duplicates(table, DedupConfig(radius=radius))
        assert dups.num_rows == len(values) - len(set(clusters.tolist()))
        # Every duplicate's kept sample is in its cluster.
        index = {f"s{i}": i for i in range(len(values))}
        for s, k in zip(dups["sample_id"].to_pylist(), dups["kept_sample_id"].to_pylist()):
            assert clusters[index[s]] == clusters[index[k]]


def test_dedup_radius_setting(monkeypatch) -> None:
    from prx_data.core.settings import get_settings, load_settings
    from prx_data.curation.exclusion import dedup_config
    from prx_data.imaging.buckets import BucketConfig

    base = {"PRX_DATA_ROOT": "/tmp/prx-radius"}
    assert load_settings(base).dedup_radius == 2  # chosen from benchmarks/bench_near_dup.py
    assert load_settings({**base, "PRX_DEDUP_RADIUS": "0"}).dedup_radius == 0
    with pytest.raises(ValueError):
        load_settings({**base, "PRX_DEDUP_RADIUS": "40"})
    monkeypatch.setenv("PRX_DEDUP_RADIUS", "3")
    get_settings.cache_clear()
    try:
        assert dedup_config(BucketConfig(), get_settings().dedup_radius).radius == 3
        assert dedup_config(BucketConfig()).radius == 2  # a plain module reads no settings
    finally:
        monkeypatch.delenv("PRX_DEDUP_RADIUS")
        get_settings.cache_clear()
