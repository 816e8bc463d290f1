"""``export.mds_format`` against mosaicml-streaming 0.13 itself: the same samples and settings give
byte-identical shards and equal index entries, and each side reads what the other wrote."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from streaming import StreamingDataset
from streaming.base.format import reader_from_json
from streaming.base.format.mds.writer import MDSWriter

from prx_data.export.mds_format import MdsShardReader, MdsShardWriter, index_json
from prx_data.export.mds_rows import MdsWriterConfig, to_row
from prx_data_tests.export.conftest import make_samples

# Every encoding the export writes (bytes, str, int32), plus the other scalars we read.
EXTRA = {"score": "float32", "rank": "int", "flag": "uint8"}


def _rows(n: int, seed: int) -> list[dict]:
    config = MdsWriterConfig()
    rows = []
    for i, sample in enumerate(make_samples("alpha", n, seed=seed)):
        row = to_row(sample, "alpha", config)
        row["caption"] = f"légende {i} " + "x" * (i * 37 % 300)  # non-ASCII, varied sizes
        row.update(score=i / 7, rank=i * 1_000_003, flag=i % 256)
        rows.append(row)
    return rows


def _write_both(tmp_path: Path, rows: list[dict], hashes: list[str], size_limit: int, flush_at: set[int]) -> tuple[Path, Path, list[dict]]:
    columns = {**MdsWriterConfig().columns(), **EXTRA}
    theirs, ours = tmp_path / "streaming", tmp_path / "ours"
    ref = MDSWriter(out=str(theirs), columns=columns, hashes=hashes or None, size_limit=size_limit)
    mine = MdsShardWriter(str(ours), columns, hashes=hashes, size_limit=size_limit)
    for i, row in enumerate(rows):
        if i in flush_at:  # the early flush write_shards makes under its memory cap
            ref.flush_shard()
            ref._reset_cache()
            mine.flush_shard()
        ref.write(row)
        mine.write(row)
        assert mine.buffered == ref.new_shard_size
    ref.finish()
    return theirs, ours, mine.finish()


@pytest.mark.parametrize(("hashes", "size_limit"), [([], 12_000), (["sha1", "xxh64"], 20_000)])
def test_shards_and_index_are_byte_identical_to_streaming(tmp_path: Path, hashes: list[str], size_limit: int) -> None:
    rows = _rows(50, seed=5)
    theirs, ours, shards = _write_both(tmp_path, rows, hashes, size_limit, flush_at={7})
    index = json.loads((theirs / "index.json").read_text())
    assert len(index["shards"]) > 3  # several full shards and one early one
    assert shards == index["shards"]
    assert index_json(shards) == (theirs / "index.json").read_text()
    shard_files = sorted(p.name for p in theirs.glob("shard.*.mds"))
    assert shard_files == sorted(p.name for p in ours.iterdir())
    for name in shard_files:
        assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name

    # A plain StreamingDataset reads our folder (our shards + the index text we produce).
    (ours / "index.json").write_text(index_json(shards))
    ds = StreamingDataset(local=str(ours), batch_size=1, shuffle=False)
    assert [ds[i]["sample_id"] for i in range(len(rows))] == [r["sample_id"] for r in rows]
    assert ds[3]["image"] == rows[3]["image"]


def test_reader_returns_what_streamings_reader_returns(tmp_path: Path) -> None:
    rows = _rows(30, seed=6)
    theirs, _, _ = _write_both(tmp_path, rows, [], 12_000, flush_at=set())
    index = json.loads((theirs / "index.json").read_text())
    seen = 0
    for info in index["shards"]:
        ref = reader_from_json(str(theirs), None, info)
        with MdsShardReader(str(theirs / info["raw_data"]["basename"]), info) as mine:
            assert len(mine) == info["samples"]
            for i in range(info["samples"]):
                got, want = mine[i], ref[i]
                assert got.keys() == want.keys()
                for key in want:
                    assert type(got[key]) is type(want[key]) and got[key] == want[key], key
                assert got["image"] == rows[seen]["image"]
                seen += 1
    assert seen == len(rows)


def test_bad_settings_input_and_shards_are_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not supported here.*bytes, str"):
        MdsShardWriter(str(tmp_path / "a"), {"image": "jpeg"})
    with pytest.raises(ValueError, match="unique and sorted"):
        MdsShardWriter(str(tmp_path / "a"), {"x": "str"}, hashes=["xxh64", "sha1"])
    with pytest.raises(ValueError, match="unknown shard hash"):
        MdsShardWriter(str(tmp_path / "a"), {"x": "str"}, hashes=["nope"])
    writer = MdsShardWriter(str(tmp_path / "w"), {"x": "str", "n": "int32"})
    with pytest.raises(TypeError, match="column 'x' .*int"):
        writer.write({"x": 5, "n": 1})
    with pytest.raises(KeyError, match="no column 'n'"):
        writer.write({"x": "a"})
    writer.write({"x": "kept", "n": np.int32(7)})  # the refused rows left nothing behind
    (info,) = writer.finish()
    assert info["samples"] == 1
    path = tmp_path / "w" / info["raw_data"]["basename"]
    with MdsShardReader(str(path), info) as reader:
        assert reader[0] == {"x": "kept", "n": 7}
        with pytest.raises(IndexError):
            reader[1]
    path.write_bytes(path.read_bytes()[:-2])
    with pytest.raises(ValueError, match="index entry says"):
        MdsShardReader(str(path), info)
    with pytest.raises(ValueError, match="compressed"):
        MdsShardReader(str(path), {**info, "compression": "zstd"})


def test_an_open_shard_is_spooled_to_disk_not_held_in_memory(tmp_path: Path) -> None:
    """40 MB into one open shard: the Python heap holds a sample at a time, not the shard (the
    driver's RSS grew with open buckets when shards were built in memory)."""
    import tracemalloc

    writer = MdsShardWriter(str(tmp_path / "w"), {"x": "bytes", "i": "int32"}, hashes=["xxh64"], size_limit=1 << 27)
    blob = bytes(range(256)) * 400  # 100 KB
    tracemalloc.start()
    try:
        for i in range(400):
            writer.write({"x": blob, "i": i})
        assert writer.open_samples == 400 and writer.buffered > 40_000_000
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2_000_000, f"the open shard's samples were held in memory: heap peak {peak:,} bytes"
    (info,) = writer.finish()
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["shard.00000.mds"]  # the spool is gone
    with MdsShardReader(str(tmp_path / "w" / "shard.00000.mds"), info) as reader:
        assert len(reader) == 400 and reader[399] == {"x": blob, "i": 399}
