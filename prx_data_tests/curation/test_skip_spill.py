"""The skip rows of a build, spilled by bucket and by sample-id range (export.skiplist.SpilledSkips, on core.spill)."""

from __future__ import annotations

import pyarrow as pa

from prx_data.export.skiplist import SKIP_SCHEMA, SpilledSkips


def _rows(*rows: tuple[str, str, str, int, str]) -> pa.Table:
    sample_id, source, shard, index, reason = zip(*rows)
    return pa.table({"sample_id": sample_id, "source": source, "shard": shard, "index_in_shard": index, "reason": reason})


def test_spilled_skips_count_samples_not_rows_and_read_a_bucket_at_a_time(tmp_path):
    # Ranges of one row: the distinct counts must add up across ranges, not within one.
    skips = SpilledSkips(str(tmp_path), expected_rows=5, range_rows=1)
    skips.add(
        _rows(
            ("0" * 31 + "1", "a", "512/512x512/a/s.mds", 0, "dedup"),
            ("0" * 31 + "1", "a", "512/512x512/a/s.mds", 0, "label:text"),  # the same sample, two reasons
            ("8" + "0" * 31, "a", "1024/768x1344/a/s.mds", 3, "dedup"),
        )
    )
    skips.close()
    assert skips.num_rows == 3 and skips.bucket_names() == ["1024/768x1344", "512/512x512"]
    assert skips.distinct_samples() == (2, {"a": 2})
    assert skips.bucket("512/512x512")["reason"].to_pylist() == ["dedup", "label:text"]
    assert skips.bucket("256/256x256").num_rows == 0

    # Rows added after a close (the fold policy's) are read with the others.
    skips.add(_rows(("f" * 32, "b", "512/512x512/b/s.mds", 1, "folded")))
    skips.close()
    assert skips.distinct_samples() == (3, {"a": 2, "b": 1})
    assert sorted(skips.bucket("512/512x512")["sample_id"].to_pylist())[-1] == "f" * 32
    every = pa.concat_tables(list(skips.id_ranges()))
    assert every.schema == SKIP_SCHEMA and every.num_rows == 4
