"""A column stage's driver keeps the rows to do in Arrow, not one Python object per row: the
Python heap of a first run does not grow with the source (issue 21 item 3)."""

from __future__ import annotations

import tracemalloc

import lance
import numpy as np
import pyarrow as pa

from prx_data.core.ids import sample_id
from prx_data.core.sorted_keys import SortedKeys
from prx_data.imaging.phash import PHASH_VERSION
from prx_data.stages.column_stage import address_chunks, run_column_stage
from prx_data.stages.phash_stage import PHASH_STAGE


def _hashes(ds, todo):
    """phash values made from nothing: only the driver's bookkeeping is measured."""
    for chunk in address_chunks(todo, 4096):
        n = chunk.num_rows
        yield pa.table(
            {
                "sample_id": chunk.column("sample_id"),
                "phash": pa.array(np.arange(n, dtype=np.int64)),
                "phash_degenerate": pa.array(np.zeros(n, dtype=bool)),
                "phash_version": pa.array([PHASH_VERSION] * n),
                "phash_error": pa.nulls(n, pa.string()),
            }
        )


def _first_run_peak(tmp_path, n: int) -> int:
    uri = str(tmp_path / f"t{n}.lance")
    ids = pa.array([sample_id("s", str(i)) for i in range(n)], pa.string())
    lance.write_dataset(pa.table({"sample_id": ids, "status": pa.array(["ok"] * n), "image_sha256": ids}), uri)
    tracemalloc.start()
    try:
        stats = run_column_stage(uri, PHASH_STAGE, _hashes)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stats.processed == n
    stored = lance.dataset(uri).to_table(columns=["phash_version", "phash_input_fp"])
    assert stored.column("phash_version").null_count == 0 and stored.column("phash_input_fp").null_count == 0
    return peak


def test_first_run_python_heap_does_not_grow_with_the_source(tmp_path):
    small, large = _first_run_peak(tmp_path, 20_000), _first_run_peak(tmp_path, 80_000)
    # A dict of fingerprints and a set of stale ids (~200 B a row) made this ~4x.
    assert large < 1.5 * small, f"4x the rows took {large / small:.2f}x the Python heap ({small} -> {large} bytes)"


def test_sorted_keys_finds_present_keys_and_nulls_absent_ones():
    keys = SortedKeys(pa.table({"sample_id": ["c", "a", "e"], "v": [3, 1, 5]}))
    asked = pa.chunked_array([["e", "b"], ["a", "z", None]])
    assert keys.get(asked, "v").to_pylist() == [5, None, 1, None, None]
    assert keys.contains(pa.array(["a", "d"])).to_pylist() == [True, False]
    empty = SortedKeys(pa.table({"sample_id": pa.array([], pa.string()), "v": pa.array([], pa.int64())}))
    assert empty.get(pa.array(["a"]), "v").to_pylist() == [None] and len(empty) == 0
