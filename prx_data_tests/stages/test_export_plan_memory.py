"""Export planning holds a batch of captions, not the source's: the Python heap of a no-change
re-run does not grow with the number of rows."""

from __future__ import annotations

import tracemalloc

from prx_data.core.paths import StoragePaths
from prx_data.imaging.buckets import BucketConfig
from prx_data.stages.export_stage import export_source
from prx_data_tests.export.rawtables import write_raw

# One 32x32 bucket, so the first export encodes tiny images (milliseconds).
TINY = BucketConfig(tiers=(32,), ar_min=1.0, ar_max=1.0, shapes_per_tier=1, multiple=16)


def _rerun_peak(tmp_path, n: int) -> int:
    paths = StoragePaths(lance_root=str(tmp_path / f"lance{n}"), mds_root=str(tmp_path / f"mds{n}"))
    items = [{"key": f"k{i}", "seed": i % 3, "w": 32, "h": 32, "caption": f"{i} " + "c" * 1000, "status": "ok"} for i in range(n)]
    write_raw(paths.raw_table("alpha"), "alpha", items)

    def run():
        return export_source(
            paths.raw_table("alpha"),
            "alpha",
            mds_root=paths.mds_root,
            exports_uri=paths.exports_table("alpha"),
            bucket_cfg=TINY,
            executor="local",
            plan_batch_rows=50,
        )

    assert run().encoded == n
    tracemalloc.start()
    try:
        stats = run()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (stats.kept, stats.encoded, stats.changed) == (n, 0, False)
    return peak


def test_no_change_rerun_python_heap_does_not_grow_with_the_source(tmp_path):
    small, large = _rerun_peak(tmp_path, 150), _rerun_peak(tmp_path, 600)
    # Per-row Python objects (captions, dicts of the last placements) would make this ~4x.
    assert large < 1.3 * small, f"4x the rows took {large / small:.2f}x the Python heap ({small} -> {large} bytes)"
