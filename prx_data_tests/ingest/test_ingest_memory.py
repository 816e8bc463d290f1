"""Ingest's driver holds a window of units and keeps its change detection in Arrow: the Python
heap of a first run and of a no-change re-run of an image folder does not grow with the number
of images (issue 21 item 3). Before, every object had a dict entry in the previous
signatures, in the kept objects and in the units held until the end of the run."""

from __future__ import annotations

import tracemalloc

from prx_data.ingest.driver import ingest_source
from prx_data.ingest.registry import load_registry
from prx_data_tests.images import jpeg

PER_FOLDER = 500


def _peaks(tmp_path, n: int) -> tuple[int, int]:
    """Python heap peaks of a first run and of a re-run of an ``n``-image folder source."""
    root = tmp_path / f"n{n}"
    data = jpeg(32, 32)
    for d in range(n // PER_FOLDER):
        sub = root / "images" / f"d{d:03d}"
        sub.mkdir(parents=True)
        for i in range(PER_FOLDER):
            (sub / f"{i:04d}.jpg").write_bytes(data)
    (root / "specs").mkdir()
    (root / "specs" / "mem.yaml").write_text(f"name: mem\nshape: image_folder\nlocation: {root / 'images'}\n")
    source = load_registry(root / "specs").get("mem")
    uri = str(root / "raw.lance")
    peaks = []
    for _ in range(2):
        tracemalloc.start()
        try:
            stats = ingest_source(source, uri)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert stats.rows == n
    assert stats.objects_unchanged == n and stats.unchanged == n and stats.new == 0
    return peaks[0], peaks[1]


def test_ingest_python_heap_does_not_grow_with_the_folder(tmp_path):
    (first_small, rerun_small), (first_large, rerun_large) = _peaks(tmp_path, 1_000), _peaks(tmp_path, 4_000)
    print(f"first run {first_small} -> {first_large} B, re-run {rerun_small} -> {rerun_large} B")
    assert first_large < 1.5 * first_small, f"first run: 4x the images took {first_large / first_small:.2f}x the Python heap"
    assert rerun_large < 1.5 * rerun_small, f"re-run: 4x the images took {rerun_large / rerun_small:.2f}x the Python heap"
