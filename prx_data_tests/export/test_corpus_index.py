from __future__ import annotations

import json
import os

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


# Publication: only buckets a trainer can batch from ---------------------------------------------
def test_sparse_and_fully_skipped_buckets_are_not_published(tmp_path) -> None:
    from prx_data.export.corpus_index import UNPUBLISHED_BASENAME, unpublished_buckets
    from prx_data.export.skiplist import build_skiplists
    from prx_data_tests.export.trainable import LAYOUT, MIN_STREAM_SAMPLES, PUBLISHED, build_corpus, prx_style_folders, skip_rows

    root = tmp_path / "mds"
    corpus = build_corpus(str(root))
    published = {f"{p.parent.parent.name}/{p.parent.name}" for p in root.glob("*/*/index.json")}
    assert published == PUBLISHED
    notes = unpublished_buckets(str(root))
    assert set(notes) == {"512/576x464", "1024/1024x1024", "4096/4096x4096"}
    assert notes["1024/1024x1024"]["reason"] == "fully skipped"
    assert (notes["512/576x464"]["samples"], notes["512/576x464"]["unskipped"]) == (3, 3)
    assert notes["4096/4096x4096"]["min_stream_samples"] == MIN_STREAM_SAMPLES
    # The shards and source indexes of an unpublished bucket stay in the tree.
    assert sorted(p.name for p in (root / "4096" / "4096x4096").iterdir()) == ["alpha", "beta", "skiplists.json", UNPUBLISHED_BASENAME]
    # A reader that lists folders with an index.json, as PRX's does, sees exactly the published ones.
    seen = {os.path.relpath(f, root) for tier in root.iterdir() for f in prx_style_folders(str(tier))}
    assert seen == PUBLISHED
    assert not list(root.glob("*/*_index.json"))  # PRX would read those as streams of the tier

    # Skips that change after indexing (an opt-out withdrawn) publish the bucket again, and
    # new skips unpublish one: the decision follows the current skip lists.
    fewer = corpus.skipped - {s for s in corpus.skipped if s.startswith("1024-")}
    more = fewer | {f"512-464x576-{i:03d}" for i in range(5)}  # 10 -> 5 unskipped
    build_skiplists(skip_rows(corpus.lineage, more), str(root))
    merged = {os.path.relpath(m.bucket_dir, root): m for m in merge_all(str(root), min_stream_samples=MIN_STREAM_SAMPLES)}
    assert {rel for rel, m in merged.items() if m.published} == (PUBLISHED - {"512/464x576"}) | {"1024/1024x1024"}
    assert merged["512/464x576"].unskipped == 5 and merged["1024/1024x1024"].unskipped == LAYOUT[(1024, 1024, 1024)][0]
    assert not (root / "1024" / "1024x1024" / UNPUBLISHED_BASENAME).exists()
    assert (root / "512" / "464x576" / UNPUBLISHED_BASENAME).exists()
    # min_stream_samples=1 publishes every bucket with an unskipped sample.
    assert all(m.published for m in merge_all(str(root), min_stream_samples=1))


def test_data_card_lists_unpublished_buckets_with_counts(tmp_path) -> None:
    from prx_data.core.paths import StoragePaths
    from prx_data.curation.report import build_data_card
    from prx_data_tests.export.trainable import build_corpus

    root = tmp_path / "mds"
    build_corpus(str(root))
    card = build_data_card(StoragePaths(lance_root=str(tmp_path / "lance"), mds_root=str(root)), []).markdown
    section = card.split("## Buckets not published for training", 1)[1].split("\n## ", 1)[0]
    assert "`min_stream_samples` (6)" in section
    assert "| 1024/1024x1024 | 8 | 0 | fully skipped |" in section
    assert "| 512/576x464 | 3 | 3 | fewer unskipped samples than min_stream_samples |" in section
    assert "| 4096/4096x4096 | 2 | 2 |" in section
    assert "512/512x512" not in section
