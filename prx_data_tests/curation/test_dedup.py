from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from prx_data.curation.dedup import DedupConfig, aspect_ratio_index, find_duplicates


def _table(rows: list[tuple]) -> pa.Table:
    sid, source, prio, tier, ar, phash = zip(*rows)
    return pa.table(
        {
            "sample_id": list(sid),
            "source": list(source),
            "source_priority": pa.array(prio, pa.int32()),
            "tier": pa.array(tier, pa.int32()),
            "ar_index": pa.array(ar, pa.int32()),
            "phash": pa.array(phash, pa.int64()),
        }
    )


ROWS = [
    ("a1", "a", 0, 512, 6, 111),
    ("b1", "b", 5, 512, 6, 111),  # higher priority than a1, same tier
    ("c1", "c", 0, 1024, 6, 111),  # higher tier wins over priority
    ("a2", "a", 0, 512, 6, 222),
    ("b2", "b", 0, 512, 6, 222),  # tie on tier and priority: smaller id (a2) kept
    ("a3", "a", 0, 512, 7, 111),  # other aspect ratio: not a duplicate of the 111 group
    ("a4", "a", 0, 512, 6, None),  # no hash: never a duplicate
    ("z9", "z", 9, 2048, 6, 333),
]


def _as_dict(result: pa.Table) -> dict[str, str]:
    return dict(zip(result["sample_id"].to_pylist(), result["kept_sample_id"].to_pylist()))


def test_keep_rules() -> None:
    result = find_duplicates(_table(ROWS))
    assert _as_dict(result) == {"b1": "c1", "a1": "c1", "b2": "a2"}
    assert set(result["reason"].to_pylist()) == {"dedup"}
    assert result.column_names[:6] == ["sample_id", "source", "source_priority", "tier", "ar_index", "phash"]


def test_order_independent() -> None:
    rng = np.random.default_rng(0)
    n = 5000
    table = pa.table(
        {
            "sample_id": [f"{i:08x}" for i in range(n)],
            "source_priority": rng.integers(0, 3, n),
            "tier": rng.choice([512, 1024], n),
            "ar_index": rng.integers(0, 3, n),
            "phash": rng.integers(-50, 50, n),
        }
    )
    expected = find_duplicates(table)
    for seed in range(3):
        perm = np.random.default_rng(seed).permutation(n)
        assert find_duplicates(table.take(perm)).equals(expected)
    # one kept per group, duplicates = rows - groups
    groups = len({(a, p) for a, p in zip(table["ar_index"].to_pylist(), table["phash"].to_pylist())})
    assert expected.num_rows == n - groups


def test_aspect_key_from_shapes_across_tiers() -> None:
    # 512-tier and 1024-tier shapes of the same grid ratio get the same key; neighbours differ.
    h = np.array([512, 1024, 448, 896, 384, 768, 2048])
    w = np.array([512, 1024, 576, 1152, 672, 1344, 2048])
    keys = aspect_ratio_index(h, w)
    assert keys[0] == keys[1] == keys[6] and keys[2] == keys[3] and keys[4] == keys[5]
    assert len({keys[0], keys[2], keys[4]}) == 3
    with pytest.raises(ValueError, match="outside"):
        aspect_ratio_index(np.array([100]), np.array([400]))
    table = pa.table(
        {
            "sample_id": ["x", "y", "z"],
            "tier": [512, 1024, 1024],
            "bucket": ["512x512", "1024x1024", "896x1152"],
            "phash": pa.array([7, 7, 7], pa.int64()),
        }
    )
    assert _as_dict(find_duplicates(table)) == {"x": "y"}
    hw = table.append_column("height", pa.array([512, 1024, 896])).append_column("width", pa.array([512, 1024, 1152]))
    assert _as_dict(find_duplicates(hw.drop(["bucket"]), DedupConfig())) == {"x": "y"}


def test_rejects_duplicate_ids_and_handles_empty() -> None:
    with pytest.raises(ValueError, match="unique"):
        find_duplicates(_table([ROWS[0], ROWS[0]]))
    assert find_duplicates(_table([ROWS[6]])).num_rows == 0


def test_aspect_key_agrees_with_the_bucketing_shapes() -> None:
    """Contract with prx_data.imaging.buckets: shape i of every tier gets key i."""
    buckets = pytest.importorskip("prx_data.imaging.buckets")
    cfg = buckets.BucketConfig()
    config = DedupConfig(num_aspect_ratios=cfg.shapes_per_tier, min_aspect=cfg.ar_min, max_aspect=cfg.ar_max)
    for tier in cfg.tiers:
        shapes = buckets.shapes_for_tier(tier, cfg)
        keys = aspect_ratio_index(np.array([h for h, _ in shapes]), np.array([w for _, w in shapes]), config)
        assert keys.tolist() == list(range(len(shapes)))


# Degenerate fingerprints: content key, never phash ------------------------------------------
FLAT = 1 << 63  # what every flat image hashes to
FLAT_SIGNED = FLAT - (1 << 64)


def _flat_rows(rows: list[tuple]) -> pa.Table:
    sid, tier, phash, degenerate, sha = zip(*rows)
    return pa.table(
        {
            "sample_id": list(sid),
            "tier": pa.array(tier, pa.int32()),
            "bucket": ["512x512" if t == 512 else "1024x1024" for t in tier],
            "phash": pa.array(phash, pa.int64()),
            "phash_degenerate": pa.array(degenerate, pa.bool_()),
            "image_sha256": pa.array(sha, pa.string()),
        }
    )


def test_degenerate_rows_match_by_content_key_only() -> None:
    table = _flat_rows(
        [
            ("red", 512, FLAT_SIGNED, True, "aa"),
            ("blue", 512, FLAT_SIGNED, True, "bb"),  # same phash, other picture: kept
            ("red-copy", 512, FLAT_SIGNED, True, "aa"),  # byte-identical to red: duplicate
            ("photo", 512, FLAT_SIGNED, False, "cc"),  # a real fingerprint equal to the flat value
            ("photo-copy", 1024, FLAT_SIGNED, False, "dd"),  # its re-encode: duplicate by phash
            ("no-sha", 512, FLAT_SIGNED, True, None),  # degenerate without a content key: never
            ("old", 512, FLAT_SIGNED, None, "ee"),  # hashed by an older version: a plain phash
        ]
    )
    assert _as_dict(find_duplicates(table)) == {"red-copy": "red", "photo": "photo-copy", "old": "photo-copy"}


def test_degenerate_rows_without_content_keys_are_never_duplicates() -> None:
    table = _flat_rows([("a", 512, FLAT_SIGNED, True, "x"), ("b", 512, FLAT_SIGNED, True, "x")]).drop(["image_sha256"])
    assert find_duplicates(table).num_rows == 0
    # Without the column at all (another branch's or an older table) rows are plain phashes.
    assert _as_dict(find_duplicates(table.drop(["phash_degenerate"]))) == {"b": "a"}


def test_exact_shape_lookup_per_tier_and_fallback() -> None:
    buckets = pytest.importorskip("prx_data.imaging.buckets")
    # Every shape of every tier keys to its index through the tier's table.
    rows = [(t, h, w, i) for t in (512, 1024, 2048, 4096) for i, (h, w) in enumerate(buckets.shapes_for_tier(t))]
    table = pa.table(
        {
            "sample_id": [f"s{k}" for k in range(len(rows))],
            "tier": pa.array([r[0] for r in rows], pa.int32()),
            "bucket": [f"{r[1]}x{r[2]}" for r in rows],
            "phash": pa.array([r[3] for r in rows], pa.int64()),  # phash = index: collide per index
        }
    )
    dups = find_duplicates(table)
    assert dups.num_rows == len(rows) - 13
    kept_tier = dict(zip(table["sample_id"].to_pylist(), table["tier"].to_pylist()))
    assert {kept_tier[k] for k in dups["kept_sample_id"].to_pylist()} == {4096}


# Real photos: a copy at another tier is found ---------------------------------------------------
def test_half_size_copies_in_another_tier_are_duplicates_when_the_phash_agrees() -> None:
    """The reported escape: a 4:3 photo at tier 1024 and its half-size copy at tier 512."""
    import io

    from PIL import Image

    from prx_data.imaging.buckets import Assignment, assign
    from prx_data.imaging.phash import phash_bytes
    from prx_data_tests.imaging.helpers import jpeg_bytes, photo

    rows = []
    for index in range(12):
        big = photo(index, seed=21, megapixels=(1.0, 1.2)).resize((1152, 864), Image.Resampling.LANCZOS)
        half = big.resize((576, 432), Image.Resampling.LANCZOS)
        for name, image in (("big", big), ("half", half)):
            data = jpeg_bytes(image, 92)
            shape = assign(*Image.open(io.BytesIO(data)).size)
            assert isinstance(shape, Assignment)
            rows.append((f"{index}-{name}", shape.tier, shape.bucket, phash_bytes(data)))
    table = pa.table(
        {
            "sample_id": [r[0] for r in rows],
            "tier": pa.array([r[1] for r in rows], pa.int32()),
            "bucket": [r[2] for r in rows],
            "phash": pa.array([r[3] for r in rows], pa.int64()),
        }
    )
    assert set(table["tier"].to_pylist()) == {512, 1024}
    equal = {r[0].split("-")[0] for r, s in zip(rows[::2], rows[1::2]) if r[3] == s[3]}
    found = _as_dict(find_duplicates(table))
    print(f"\nhalf-size copies with the photo's phash: {len(equal)}/12, all deduplicated")
    assert len(equal) >= 8  # the project's phash keeps ~87 % of half-size copies equal
    assert found == {f"{i}-half": f"{i}-big" for i in equal}  # every one of them, the big one kept
