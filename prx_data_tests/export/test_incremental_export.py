"""Incremental export: a re-run does only the work that changed, and what a trainer reads (shards
minus skip-list sidecars) is always exactly the source's current rows, each once."""

from __future__ import annotations

import hashlib
from pathlib import Path

import lance
import pytest

from prx_data.core.paths import StoragePaths
from prx_data.curation.exclusion import compute_skips, write_skip_lists
from prx_data.export.corpus_index import merge_all
from prx_data.imaging.buckets import BucketConfig
from prx_data.stages import export_stage
from prx_data.stages.export_stage import export_source
from prx_data_tests.export.rawtables import item, visible_samples, write_raw


@pytest.fixture
def paths(tmp_path: Path) -> StoragePaths:
    return StoragePaths(lance_root=str(tmp_path / "lance"), mds_root=str(tmp_path / "mds"))


@pytest.fixture
def encodes(monkeypatch) -> list[int]:
    """How many images the export decodes and encodes (the image work), counted in prepare()."""
    calls = [0]
    real = export_stage.prepare

    def counting(data, cfg):
        calls[0] += 1
        return real(data, cfg)

    monkeypatch.setattr(export_stage, "prepare", counting)
    return calls


def export(paths: StoragePaths, source: str = "alpha", **kwargs):
    kwargs.setdefault("executor", "local")
    stats = export_source(paths.raw_table(source), source, mds_root=paths.mds_root, exports_uri=paths.exports_table(source), **kwargs)
    merge_all(paths.mds_root)
    _, skips = compute_skips(paths, {source: 1}, bucket_cfg=BucketConfig())
    write_skip_lists(paths.mds_root, skips)
    return stats


def tree_files(root: str) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(Path(root).rglob("*"))
        if p.is_file() and "_commits" not in p.parts
    }


def all_samples(root: str) -> int:
    """Read every sample of every source index (ignoring skip lists); returns how many."""
    import json
    import os

    from streaming.base.format import reader_from_json

    from prx_data.export.tree import list_buckets, list_sources

    count = 0
    for ref in list_buckets(root):
        for source in list_sources(ref.dir(root)):
            folder = ref.source_dir(root, source)
            for info in json.loads(Path(folder, "index.json").read_text())["shards"]:
                reader = reader_from_json(folder, None, info)
                count += sum(1 for i in range(info["samples"]) if reader[i]["sample_id"])
            assert os.path.isfile(os.path.join(folder, "index.json"))
    return count


def expect_visible(paths: StoragePaths, items: list[dict]) -> dict[str, dict]:
    from prx_data.core.ids import sample_id

    seen = visible_samples(paths.mds_root)
    want = {sample_id("alpha", it["key"]): it["caption"] for it in items if it["status"] == "ok"}
    assert {sid: s["caption"] for sid, s in seen.items()} == want
    return seen


def test_rerun_without_change_does_no_image_work_and_writes_nothing(paths, encodes):
    items = [item(f"k{i}", i) for i in range(9)]
    write_raw(paths.raw_table("alpha"), "alpha", items)
    first = export(paths)
    assert first.encoded == 9 and encodes[0] == 9 and first.changed
    files, version = tree_files(paths.mds_root), lance.dataset(paths.exports_table("alpha")).version
    second = export(paths)
    assert encodes[0] == 9, "a run with nothing new decoded images"
    assert (second.encoded, second.reused, second.kept, second.changed) == (0, 0, 9, False)
    assert tree_files(paths.mds_root) == files
    assert lance.dataset(paths.exports_table("alpha")).version == version
    expect_visible(paths, items)


def test_new_rows_are_appended_and_changes_supersede_old_placements(paths, encodes):
    items = [item(f"k{i}", i) for i in range(12)]
    write_raw(paths.raw_table("alpha"), "alpha", items)
    export(paths)
    before = expect_visible(paths, items)
    old_shards = {k: v for k, v in tree_files(paths.mds_root).items() if k.endswith(".mds")}
    encodes[0] = 0

    items[0]["caption"] = "a new caption for k0"  # caption only: the old JPEG bytes are re-used
    items[1]["seed"] = 101  # a new image under the same key: encoded again
    removed = items.pop(2)
    items += [item("n1", 50), item("n2", 51)]
    write_raw(paths.raw_table("alpha"), "alpha", items)
    stats = export(paths, rewrite_share=0.9)

    assert encodes[0] == 3, "only the new image and the two new rows are encoded"
    assert (stats.encoded, stats.reused, stats.kept, stats.superseded) == (3, 1, 9, 3)
    assert stats.rewritten_buckets == []
    after_files = tree_files(paths.mds_root)
    assert all(after_files.get(k) == v for k, v in old_shards.items()), "old shards are kept as they were"
    seen = expect_visible(paths, items)
    k0 = next(sid for sid, s in seen.items() if s["caption"] == "a new caption for k0")
    assert seen[k0]["image"] == before[k0]["image"], "a changed caption re-uses the encoded bytes"
    assert removed["caption"] not in {s["caption"] for s in seen.values()}
    superseded = lance.dataset(paths.superseded_table("alpha")).to_table().to_pylist()
    assert len(superseded) == 3 and all(r["shard"] in {k.replace("\\", "/") for k in old_shards} for r in superseded)
    exports = lance.dataset(paths.exports_table("alpha")).to_table()
    assert exports.num_rows == len(items) and exports["drop_reason"].null_count == len(items)


def test_bucket_is_rewritten_once_superseded_share_passes_threshold(paths, encodes):
    items = [item(f"k{i}", i, shape=0) for i in range(10)] + [item(f"s{i}", 20 + i, shape=2) for i in range(4)]
    write_raw(paths.raw_table("alpha"), "alpha", items)
    export(paths)
    square = {k: v for k, v in tree_files(paths.mds_root).items() if "/512x512/" in k and k.endswith(".mds")}
    encodes[0] = 0
    items[0]["caption"] = "changed"  # 1 of 10 in the landscape bucket: 1/11 = 9 % < 10 %
    write_raw(paths.raw_table("alpha"), "alpha", items)
    first = export(paths)
    assert first.rewritten_buckets == [] and first.superseded_total == 1
    items[1]["caption"] = "changed too"  # 2 superseded of 12: past 10 %
    write_raw(paths.raw_table("alpha"), "alpha", items)
    second = export(paths)
    (bucket,) = second.rewritten_buckets
    assert "/512x512" not in bucket and encodes[0] == 0, "a rewrite copies encoded bytes, it never re-encodes"
    assert second.superseded_total == 0 and second.reused == 10
    assert not lance.dataset(paths.superseded_table("alpha")).count_rows()
    files = tree_files(paths.mds_root)
    assert {k: v for k, v in files.items() if "/512x512/" in k and k.endswith(".mds")} == square, "other buckets untouched"
    rewritten = [k for k in files if k.startswith(bucket) and k.endswith(".mds")]
    assert sum(1 for _ in rewritten) >= 1
    expect_visible(paths, items)


def test_empty_source_exports_nothing_and_a_source_that_empties_is_removed(paths):
    write_raw(paths.raw_table("alpha"), "alpha", [item("bad", 1, status="invalid_image")])
    stats = export(paths)
    assert stats.exported == 0 and not stats.dropped
    write_raw(paths.raw_table("alpha"), "alpha", [])
    assert export(paths).exported == 0
    items = [item(f"k{i}", i) for i in range(4)]
    write_raw(paths.raw_table("alpha"), "alpha", items)
    export(paths)
    expect_visible(paths, items)
    write_raw(paths.raw_table("alpha"), "alpha", [])
    gone = export(paths)
    assert gone.exported == 0 and len(gone.removed_buckets) == 3
    assert visible_samples(paths.mds_root) == {}


def test_killed_between_mds_commit_and_tables_is_completed_by_next_run(paths, monkeypatch):
    items = [item(f"k{i}", i) for i in range(6)]
    write_raw(paths.raw_table("alpha"), "alpha", items)
    export(paths)
    published = tree_files(paths.mds_root)

    # Killed while encoding (before the commit point): nothing a reader sees changes.
    real_prepare = export_stage.prepare

    def dies(data, cfg):
        raise KeyboardInterrupt("killed while encoding")

    items[0]["caption"] = "edited"
    items.append(item("n1", 40))
    write_raw(paths.raw_table("alpha"), "alpha", items)
    monkeypatch.setattr(export_stage, "prepare", dies)
    with pytest.raises(KeyboardInterrupt):
        export_source(
            paths.raw_table("alpha"), "alpha", mds_root=paths.mds_root, exports_uri=paths.exports_table("alpha"), executor="local"
        )
    monkeypatch.setattr(export_stage, "prepare", real_prepare)
    assert tree_files(paths.mds_root) == published

    # Killed after the MDS commit, before the exports table was written: the new shards are
    # published, no table knows them. Every source index stays a readable MDS index.
    real_write = lance.write_dataset

    def dies_on_tables(*args, **kwargs):
        raise KeyboardInterrupt("killed before the tables")

    monkeypatch.setattr(export_stage.lance, "write_dataset", dies_on_tables)
    with pytest.raises(KeyboardInterrupt):
        export_source(
            paths.raw_table("alpha"),
            "alpha",
            mds_root=paths.mds_root,
            exports_uri=paths.exports_table("alpha"),
            executor="local",
            rewrite_share=0.9,
        )
    monkeypatch.setattr(export_stage.lance, "write_dataset", real_write)
    assert all_samples(paths.mds_root) == 6 + 2, "old and appended shards are readable"
    assert {k: v for k, v in tree_files(paths.mds_root).items() if k in published and k.endswith(".mds")} == {
        k: v for k, v in published.items() if k.endswith(".mds")
    }

    # The next run supersedes the orphaned placements and finishes the job.
    stats = export(paths, rewrite_share=0.9)
    assert stats.superseded == 3, "k0's first placement and both orphaned placements"
    expect_visible(paths, items)
    assert export(paths, rewrite_share=0.9).changed is False


@pytest.fixture
def ray_driver(shared_ray_head, monkeypatch):
    import ray

    if shared_ray_head:
        # The session head's token and loopback switch are in the environment (conftest.py).
        ray.init(address=shared_ray_head, log_to_driver=False)
    else:
        monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_parallel_writers_each_write_their_shards_and_one_commit_merges_them(paths, ray_driver):
    items = [item(f"k{i}", i) for i in range(10)]
    write_raw(paths.raw_table("alpha"), "alpha", items)
    # The rows to encode are spilled in ranges of 3 rows of scan order (4 ranges); each task still
    # gets a contiguous half of scan order, pieced together from ranges.
    stats = export(paths, executor="ray", write_workers=2, max_partition_rows=3)
    assert stats.encoded == 10 and stats.exported == 10
    expect_visible(paths, items)
    shards = [k for k in tree_files(paths.mds_root) if k.endswith(".mds")]
    names = [name.rsplit("/", 1)[1].split(".") for name in shards]
    assert len({run for run, *_ in names}) == 1 and {tag for _, tag, *_ in names} == {"p1", "p2"}, "each task wrote its own shards"
    exports = lance.dataset(paths.exports_table("alpha")).to_table()
    assert set(exports["shard"].to_pylist()) == set(shards)
    scan = lance.dataset(paths.raw_table("alpha")).to_table(columns=["sample_id"])["sample_id"].to_pylist()
    tag_of = {
        sid: shard.rsplit("/", 1)[1].split(".")[1] for sid, shard in zip(exports["sample_id"].to_pylist(), exports["shard"].to_pylist())
    }
    assert [tag_of[sid] for sid in scan] == ["p1"] * 5 + ["p2"] * 5

    items[0]["caption"] = "edited"  # re-used bytes, written by the driver beside the tasks
    items += [item("n1", 60), item("n2", 61), item("n3", 62)]
    write_raw(paths.raw_table("alpha"), "alpha", items)
    again = export(paths, executor="ray", write_workers=2, rewrite_share=0.9)
    assert (again.encoded, again.reused, again.kept) == (3, 1, 9)
    expect_visible(paths, items)
    assert not list(Path(paths.mds_root, "_commits").iterdir()), "no marker, journal or staging is left"
    new = set(lance.dataset(paths.exports_table("alpha")).to_table()["shard"].to_pylist()) - set(shards)
    assert {name.rsplit("/", 1)[1].split(".")[1] for name in new} == {"p0", "p1", "p2"}, "the driver's re-used bytes and two tasks"
