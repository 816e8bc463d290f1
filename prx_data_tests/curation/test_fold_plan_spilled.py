"""The fold plan read a bucket at a time (``curation.exclusion.SpilledPlacements``): from placements and
skip rows spilled by bucket it decides the same folds, refusals and moving samples as from whole
tables, and reads each bucket's placements and skip rows once, one bucket at a time."""

from __future__ import annotations

import pyarrow as pa

from prx_data.curation.exclusion import PLACEMENT_SCHEMA, SpilledPlacements
from prx_data.curation.fold import FoldPolicy, folded_skip_rows, plan_folds
from prx_data.export.skiplist import SKIP_SCHEMA, SpilledSkips
from prx_data.imaging.buckets import BucketConfig, shapes_for_tier

SHAPES = shapes_for_tier(512, BucketConfig())  # aspect index -> (height, width); 6 is square
POLICY = FoldPolicy(enabled=True, max_steps=2, min_stream_samples=4)


def _bucket(index: int) -> str:
    height, width = SHAPES[index]
    return f"{height}x{width}"


def _world() -> tuple[pa.Table, pa.Table]:
    """Bucket 6 published (10 live); 7 sparse (2); 5 sparse once 3 of its 5 are skipped; 0 sparse
    and 6 steps from anything published (refused); and a never-placed row (no shard)."""
    rows: list[tuple] = []
    skips: list[tuple] = []
    for index, count in ((6, 10), (7, 2), (5, 5), (0, 1)):
        for i in range(count):
            sid = f"{index:02d}{i:030d}"
            shard = f"512/{_bucket(index)}/src{i % 2}/p0/shard.{i // 3:05d}.mds"
            rows.append((sid, f"src{i % 2}", 512, _bucket(index), shard, i % 3))
            if index == 5 and i < 3:
                skips.append((sid, f"src{i % 2}", shard, i % 3, "dedup", None))
    rows.append(("9" * 32, "src0", None, None, None, None))
    placements = pa.table(list(zip(*rows)), schema=PLACEMENT_SCHEMA)
    return placements, pa.table(list(zip(*skips)), schema=SKIP_SCHEMA)


class CountingReads:
    """A bucket source that records every read."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.reads: list[tuple[str, int]] = []

    def bucket_names(self) -> list[str]:
        return self.inner.bucket_names()

    def bucket(self, name: str) -> pa.Table:
        rows = self.inner.bucket(name)
        self.reads.append((name, rows.num_rows))
        return rows


def test_spilled_inputs_give_the_plan_of_whole_tables(tmp_path):
    placements, skips = _world()
    whole = plan_folds(placements, skips, BucketConfig(), POLICY)
    assert whole.folds == {f"512/{_bucket(5)}": f"512/{_bucket(6)}", f"512/{_bucket(7)}": f"512/{_bucket(6)}"}
    assert whole.refused == {f"512/{_bucket(0)}": 1}
    assert sorted(whole.rows["folded_from"].to_pylist()) == sorted([f"512/{_bucket(5)}"] * 2 + [f"512/{_bucket(7)}"] * 2)

    spilled_placements = SpilledPlacements(str(tmp_path / "placements"), PLACEMENT_SCHEMA)
    spilled_skips = SpilledSkips(str(tmp_path / "skips"))
    for start in range(0, placements.num_rows, 4):  # as the scan hands them over: in batches
        spilled_placements.add(placements.slice(start, 4))
    spilled_skips.add(skips)
    placed, skipped = CountingReads(spilled_placements.close()), CountingReads(spilled_skips.close())
    spilled = plan_folds(placed, skipped, BucketConfig(), POLICY)

    assert (spilled.folds, spilled.refused) == (whole.folds, whole.refused)
    assert spilled.rows.sort_by("sample_id").equals(whole.rows.sort_by("sample_id"))
    # Each bucket read once, alone: at most the largest bucket's rows at a time.
    assert sorted(name for name, _ in placed.reads) == sorted(spilled_placements.bucket_names())
    assert len(placed.reads) == 4 and max(n for _, n in placed.reads) == 10
    assert dict(skipped.reads)[f"512/{_bucket(5)}"] == 3 and len(skipped.reads) == 4

    # The folded originals' skip rows, found bucket by bucket, are those found in the table.
    folds = whole.rows.select(["sample_id"])
    by_bucket = folded_skip_rows(spilled_placements, folds, SKIP_SCHEMA).sort_by("sample_id")
    assert by_bucket.equals(folded_skip_rows(placements, folds, SKIP_SCHEMA).sort_by("sample_id"))
    assert by_bucket.num_rows == 4 and set(by_bucket["reason"].to_pylist()) == {"folded"}


def test_a_policy_that_is_off_reads_nothing(tmp_path):
    placements, skips = _world()
    placed = CountingReads(SpilledPlacements(str(tmp_path / "p"), PLACEMENT_SCHEMA))
    placed.inner.add(placements)
    placed.inner.close()
    plan = plan_folds(placed, skips, BucketConfig(), FoldPolicy(enabled=False))
    assert (plan.folds, plan.refused, plan.rows.num_rows, placed.reads) == ({}, {}, 0, [])
