from __future__ import annotations

import json
from pathlib import Path

import pytest
from streaming import StreamingDataset

from prx_data.export.corpus_index import StaleIndexError, check_merged_fresh, merge_all, merge_bucket_index
from prx_data.export.mds_writer import write_partition
from prx_data_tests.export.conftest import SMALL, make_samples


def test_streaming_dataset_reads_every_sample_of_both_sources(tree) -> None:
    root, lineage = tree
    bucket = root / "512" / "512x512"
    index = json.loads((bucket / "index.json").read_text())
    assert {s["raw_data"]["basename"].split("/")[0] for s in index["shards"]} == {"alpha", "beta"}
    want = sorted(r["sample_id"] for r in lineage.to_pylist() if r["shard"].startswith("512/512x512/"))
    ds = StreamingDataset(local=str(bucket), remote=None, batch_size=4)
    got = [sample["sample_id"] for sample in ds]
    assert sorted(got) == want and len(got) == len(set(got))
    assert ds.num_samples == len(want)


def test_merge_is_deterministic_and_not_rewritten(tree) -> None:
    root, _ = tree
    path = root / "512" / "512x512" / "index.json"
    first = path.read_bytes()
    inode = path.stat().st_ino
    results = merge_all(str(root))
    assert all(not r.written for r in results)
    assert path.read_bytes() == first and path.stat().st_ino == inode
    path.unlink()
    merge_bucket_index(str(path.parent))
    assert path.read_bytes() == first
    assert list(json.loads(first)["prx"]["sources"]) == ["alpha", "beta"]


def test_stale_merge_detected_and_empty_bucket_loses_its_index(tree) -> None:
    root, _ = tree
    bucket = root / "512" / "512x512"
    check_merged_fresh(str(bucket))
    write_partition(make_samples("beta", 5, seed=11, buckets=[(512, 448, 576)]), mds_root=str(root), source="beta", config=SMALL)
    with pytest.raises(StaleIndexError, match="beta"):
        check_merged_fresh(str(bucket))
    merge_all(str(root))
    check_merged_fresh(str(bucket))
    assert set(json.loads((bucket / "index.json").read_text())["prx"]["sources"]) == {"alpha"}
    write_partition(make_samples("alpha", 5, seed=12, buckets=[(512, 448, 576)]), mds_root=str(root), source="alpha", config=SMALL)
    merge_all(str(root))
    assert not (bucket / "index.json").exists()  # no source left: not a stream any more
