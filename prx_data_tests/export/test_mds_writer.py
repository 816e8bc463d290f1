from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from streaming.base.format import reader_from_json

from prx_data.export.mds_writer import (
    MdsWriterConfig,
    _apply_journal,
    journal_path,
    recover_source,
    staging_name,
    write_partition,
)
from prx_data.export._fs import dumps_stable
from prx_data.core.storage import atomic_write_bytes
from prx_data_tests.export.conftest import SMALL, make_samples


def _read_sample(root: Path, shard_rel: str, index: int) -> dict:
    shard_dir = root / os.path.dirname(shard_rel)
    obj = json.loads((shard_dir / "index.json").read_text())
    info = next(s for s in obj["shards"] if s["raw_data"]["basename"] == os.path.basename(shard_rel))
    reader = reader_from_json(str(shard_dir), None, info)
    return reader[index]


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "_commits" not in p.parts
    }


def test_bytes_kept_and_lineage_points_at_each_sample(tmp_path: Path) -> None:
    samples = make_samples("alpha", 60, seed=3)
    result = write_partition(samples, mds_root=str(tmp_path), source="alpha", config=SMALL)
    by_id = {s["sample_id"]: s for s in samples}
    assert result.lineage.num_rows == 60
    assert sum(result.samples_per_bucket.values()) == 60
    shards = set(result.lineage["shard"].to_pylist())
    assert len(shards) > 3  # small size_limit -> several shards per bucket
    for row in result.lineage.to_pylist():
        stored = _read_sample(tmp_path, row["shard"], row["index_in_shard"])
        want = by_id[row["sample_id"]]
        assert stored["sample_id"] == row["sample_id"]
        assert stored["image"] == want["image"]  # JPEG bytes stored unchanged (no re-encode)
        assert stored["caption"] == want["caption"]
        assert stored["original_width"] == want["original_width"]
        assert stored["label"] == "visual" and stored["caption_model"] == "test-model"
        assert row["shard"].startswith(f"{want['tier']}/{want['height']}x{want['width']}/alpha/shard.")
        assert row["bucket"] == f"{want['height']}x{want['width']}" and row["tier"] == want["tier"]
    # nothing transient left behind
    leftovers = [p for p in tmp_path.rglob("*") if ".staging-" in p.name or ".old-" in p.name]
    assert leftovers == [] and not os.path.exists(journal_path(str(tmp_path), "alpha"))


def test_memory_cap_flushes_early_and_lineage_stays_exact(tmp_path: Path) -> None:
    config = MdsWriterConfig(size_limit=10_000_000, max_buffered_bytes=5_000)
    samples = make_samples("alpha", 40, seed=4)
    result = write_partition(samples, mds_root=str(tmp_path), source="alpha", config=config)
    assert len(set(result.lineage["shard"].to_pylist())) > 3
    for row in result.lineage.to_pylist():
        assert _read_sample(tmp_path, row["shard"], row["index_in_shard"])["sample_id"] == row["sample_id"]


def test_failure_mid_write_leaves_previous_export_unchanged(tmp_path: Path) -> None:
    write_partition(make_samples("alpha", 50, seed=1), mds_root=str(tmp_path), source="alpha", config=SMALL)
    before = _tree_digest(tmp_path)

    def exploding():
        for i, sample in enumerate(make_samples("alpha", 80, seed=2)):
            if i == 60:
                raise RuntimeError("boom")
            yield sample

    with pytest.raises(RuntimeError, match="boom"):
        write_partition(exploding(), mds_root=str(tmp_path), source="alpha", config=SMALL)
    assert _tree_digest(tmp_path) == before
    assert not [p for p in tmp_path.rglob("*") if ".staging-" in p.name]


def test_bad_sample_and_empty_input_fail_without_touching_export(tmp_path: Path) -> None:
    write_partition(make_samples("alpha", 20, seed=1), mds_root=str(tmp_path), source="alpha", config=SMALL)
    before = _tree_digest(tmp_path)
    bad = make_samples("alpha", 10, seed=2)
    bad[5]["image"] = b"\x89PNG not a jpeg"
    with pytest.raises(ValueError, match="not JPEG"):
        write_partition(bad, mds_root=str(tmp_path), source="alpha", config=SMALL)
    dup = make_samples("alpha", 10, seed=2)
    dup[3]["sample_id"] = dup[4]["sample_id"]
    with pytest.raises(ValueError, match="duplicate sample_id"):
        write_partition(dup, mds_root=str(tmp_path), source="alpha", config=SMALL)
    with pytest.raises(ValueError, match="no samples"):
        write_partition([], mds_root=str(tmp_path), source="alpha", config=SMALL)
    assert _tree_digest(tmp_path) == before


def test_reexport_replaces_source_and_removes_gone_buckets(tmp_path: Path) -> None:
    write_partition(make_samples("alpha", 40, seed=1), mds_root=str(tmp_path), source="alpha", config=SMALL)
    write_partition(make_samples("beta", 10, seed=9), mds_root=str(tmp_path), source="beta", config=SMALL)
    beta_before = {k: v for k, v in _tree_digest(tmp_path).items() if "/beta/" in k}
    only_square = [(512, 512, 512)]
    result = write_partition(
        make_samples("alpha", 15, seed=5, buckets=only_square), mds_root=str(tmp_path), source="alpha", config=SMALL
    )
    assert [b.rel for b in result.buckets] == ["512/512x512"]
    assert sorted(b.rel for b in result.removed_buckets) == ["1024/1024x1024", "512/448x576"]
    assert not (tmp_path / "512" / "448x576" / "alpha").exists()
    assert not (tmp_path / "1024" / "1024x1024" / "alpha").exists()
    assert {k: v for k, v in _tree_digest(tmp_path).items() if "/beta/" in k} == beta_before
    index = json.loads((tmp_path / "512" / "512x512" / "alpha" / "index.json").read_text())
    assert sum(s["samples"] for s in index["shards"]) == 15


def test_interrupted_commit_is_rolled_forward(tmp_path: Path) -> None:
    root = str(tmp_path)
    write_partition(make_samples("alpha", 30, seed=1), mds_root=root, source="alpha", config=SMALL)
    new = write_partition(
        make_samples("alpha", 12, seed=7), mds_root=str(tmp_path / "scratch"), source="alpha", config=SMALL, run_id="r2"
    )
    # Simulate a crash after the commit point: staging folders + journal exist, one bucket swapped.
    journal = {"source": "alpha", "run_id": "r2", "install": [b.rel for b in new.buckets], "remove": []}
    for ref in new.buckets:
        os.rename(ref.source_dir(str(tmp_path / "scratch"), "alpha"), os.path.join(ref.dir(root), staging_name("alpha", "r2")))
    atomic_write_bytes(journal_path(root, "alpha"), dumps_stable(journal))
    first = {**journal, "install": journal["install"][:1]}
    _apply_journal(root, first)
    assert recover_source(root, "alpha") is True
    for ref in new.buckets:
        index = json.loads(open(os.path.join(ref.source_dir(root, "alpha"), "index.json")).read())
        assert sum(s["samples"] for s in index["shards"]) == new.samples_per_bucket[ref.rel]
    assert not os.path.exists(journal_path(root, "alpha"))
    assert not [p for p in tmp_path.rglob("*") if ".staging-" in p.name or ".old-" in p.name]


def test_killed_run_leftovers_are_cleaned_and_concurrent_export_refused(tmp_path: Path) -> None:
    import fcntl

    root = str(tmp_path)
    write_partition(make_samples("alpha", 20, seed=1), mds_root=root, source="alpha", config=SMALL)
    before = _tree_digest(tmp_path)
    # a killed run leaves a half-written staging folder and no journal
    junk = tmp_path / "512" / "512x512" / staging_name("alpha", "killed")
    junk.mkdir()
    (junk / "shard.00000.mds").write_bytes(b"partial")
    assert {k: v for k, v in _tree_digest(tmp_path).items() if "staging" not in k} == before
    with open(os.path.join(root, "_commits", "alpha.lock"), "a+") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        with pytest.raises(RuntimeError, match="another export"):
            write_partition(make_samples("alpha", 5, seed=2), mds_root=root, source="alpha", config=SMALL)
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    write_partition(make_samples("alpha", 5, seed=2), mds_root=root, source="alpha", config=SMALL)
    assert not junk.exists()
