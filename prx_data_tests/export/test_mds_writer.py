"""The one commit protocol, on a local folder and on moto S3 (``storage_root``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from streaming.base.format import reader_from_json

from prx_data.core.storage import locate, try_read_bytes
from prx_data.export import commit
from prx_data.export.commit import COMMITS_DIR, new_run_id, run_of_object
from prx_data.export.mds_writer import MdsWriterConfig, write_partition
from prx_data_tests.export.conftest import BUCKETS, SMALL, jpeg_bytes, make_samples
from prx_data_tests.storage_parity import StorageRoot

REPO = Path(__file__).resolve().parents[2]


def _mirror(root: StorageRoot, into: Path) -> Path:
    """A local copy of the whole tree, for MDS readers that open real files."""
    for rel, data in root.files().items():
        path = into / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return into


def _read_sample(tree: Path, shard_rel: str, index: int) -> dict:
    shard_dir = tree / os.path.dirname(shard_rel)
    obj = json.loads((shard_dir / "index.json").read_text())
    info = next(s for s in obj["shards"] if s["raw_data"]["basename"] == os.path.basename(shard_rel))
    return reader_from_json(str(shard_dir), None, info)[index]


def _published(root: StorageRoot) -> dict[str, bytes]:
    """What a reader resolves: every index.json and every shard one names, with their bytes."""
    files = root.files()
    out = {}
    for rel, data in files.items():
        if rel.endswith("/index.json"):
            out[rel] = data
            folder = rel.rsplit("/", 1)[0]
            for info in json.loads(data)["shards"]:
                name = f"{folder}/{info['raw_data']['basename']}"
                out[name] = files[name]
    return out


def _run_objects(root: StorageRoot, run_id: str) -> list[str]:
    return sorted(rel for rel in root.files() if run_of_object(rel.rsplit("/", 1)[-1]) == run_id or f".{run_id}." in rel)


def test_bytes_kept_and_lineage_points_at_each_sample(storage_root: StorageRoot, tmp_path: Path) -> None:
    samples = make_samples("alpha", 60, seed=3)
    result = write_partition(samples, mds_root=storage_root.base, source="alpha", storage_options=storage_root.options, config=SMALL)
    tree = _mirror(storage_root, tmp_path / "copy")
    by_id = {s["sample_id"]: s for s in samples}
    assert result.lineage.num_rows == 60 and sum(result.samples_per_bucket.values()) == 60
    assert len(set(result.lineage["shard"].to_pylist())) > 3  # small size_limit -> several shards per bucket
    for row in result.lineage.to_pylist():
        stored = _read_sample(tree, row["shard"], row["index_in_shard"])
        want = by_id[row["sample_id"]]
        assert stored["sample_id"] == row["sample_id"]
        assert stored["image"] == want["image"]  # JPEG bytes stored unchanged (no re-encode)
        assert stored["caption"] == want["caption"] and stored["original_width"] == want["original_width"]
        assert stored["label"] == "visual" and stored["caption_model"] == "test-model"
        assert row["shard"].startswith(f"{want['tier']}/{want['height']}x{want['width']}/alpha/{result.run_id}.p0.shard.")
    # nothing transient left behind: no marker, no journal, no staged index
    assert not [rel for rel in storage_root.files() if rel.startswith(f"{COMMITS_DIR}/") or rel.endswith(f"{result.run_id}.index.json")]


def test_memory_cap_flushes_early_and_lineage_stays_exact(tmp_path: Path) -> None:
    config = MdsWriterConfig(size_limit=10_000_000, max_buffered_bytes=5_000)
    result = write_partition(make_samples("alpha", 40, seed=4), mds_root=str(tmp_path), source="alpha", config=config)
    assert len(set(result.lineage["shard"].to_pylist())) > 3
    for row in result.lineage.to_pylist():
        assert _read_sample(tmp_path, row["shard"], row["index_in_shard"])["sample_id"] == row["sample_id"]


def test_failure_mid_write_leaves_export_and_no_objects(storage_root: StorageRoot) -> None:
    kw: dict[str, Any] = dict(mds_root=storage_root.base, source="alpha", storage_options=storage_root.options, config=SMALL)
    write_partition(make_samples("alpha", 50, seed=1), **kw)
    before = storage_root.files()

    def exploding():
        for i, sample in enumerate(make_samples("alpha", 80, seed=2)):
            if i == 60:
                raise RuntimeError("boom")
            yield sample

    with pytest.raises(RuntimeError, match="boom"):
        write_partition(exploding(), **kw)
    assert storage_root.files() == before  # shards already moved to the root were deleted again


def test_bad_sample_and_empty_input_fail_without_touching_export(storage_root: StorageRoot) -> None:
    kw: dict[str, Any] = dict(mds_root=storage_root.base, source="alpha", storage_options=storage_root.options, config=SMALL)
    write_partition(make_samples("alpha", 20, seed=1), **kw)
    before = storage_root.files()
    bad = make_samples("alpha", 10, seed=2)
    bad[5]["image"] = b"\x89PNG not a jpeg"
    with pytest.raises(ValueError, match="not JPEG"):
        write_partition(bad, **kw)
    dup = make_samples("alpha", 10, seed=2)
    dup[3]["sample_id"] = dup[4]["sample_id"]
    with pytest.raises(ValueError, match="duplicate sample_id"):
        write_partition(dup, **kw)
    with pytest.raises(ValueError, match="no samples"):
        write_partition([], **kw)
    with pytest.raises(ValueError, match="run id"):
        write_partition(make_samples("alpha", 3, seed=2), run_id="r2", **kw)
    assert storage_root.files() == before


def test_reexport_replaces_source_and_removes_gone_buckets(storage_root: StorageRoot) -> None:
    kw: dict[str, Any] = dict(mds_root=storage_root.base, storage_options=storage_root.options, config=SMALL)
    write_partition(make_samples("alpha", 40, seed=1), source="alpha", **kw)
    write_partition(make_samples("beta", 10, seed=9), source="beta", **kw)
    beta_before = {k: v for k, v in storage_root.files().items() if "/beta/" in k}
    result = write_partition(make_samples("alpha", 15, seed=5, buckets=[(512, 512, 512)]), source="alpha", **kw)
    assert [b.rel for b in result.buckets] == ["512/512x512"]
    assert sorted(b.rel for b in result.removed_buckets) == ["1024/1024x1024", "512/448x576"]
    published = _published(storage_root)
    assert sorted(rel for rel in published if rel.endswith("index.json") and "/alpha/" in rel) == ["512/512x512/alpha/index.json"]
    assert {k: v for k, v in storage_root.files().items() if "/beta/" in k} == beta_before
    index = json.loads(published["512/512x512/alpha/index.json"])
    assert sum(s["samples"] for s in index["shards"]) == 15
    assert all(s["raw_data"]["basename"].startswith(result.run_id) for s in index["shards"])


def test_interrupted_flip_is_rolled_forward(storage_root: StorageRoot, monkeypatch: pytest.MonkeyPatch) -> None:
    kw: dict[str, Any] = dict(mds_root=storage_root.base, source="alpha", storage_options=storage_root.options, config=SMALL)
    write_partition(make_samples("alpha", 30, seed=1), **kw)
    real_write = commit.write_bytes
    flips = []

    def crash_after_first_flip(loc, data):
        if loc.path.endswith("/index.json") and "/alpha/" in loc.path:
            flips.append(loc.path)
            if len(flips) == 2:
                raise KeyboardInterrupt("killed mid-flip")
        real_write(loc, data)

    monkeypatch.setattr(commit, "write_bytes", crash_after_first_flip)
    with pytest.raises(KeyboardInterrupt):
        write_partition(make_samples("alpha", 12, seed=7), **kw)
    monkeypatch.setattr(commit, "write_bytes", real_write)
    root = locate(storage_root.base, storage_root.options)
    journal = json.loads(try_read_bytes(root.child(COMMITS_DIR, "alpha.json")) or b"")  # past the commit point: kept
    report = commit.recover(storage_root.base, "alpha", storage_root.options)
    assert report["rolled_forward"] == journal["run_id"]
    published = _published(storage_root)
    counts = {rel: sum(s["samples"] for s in json.loads(data)["shards"]) for rel, data in published.items() if rel.endswith("index.json")}
    assert sum(counts.values()) == 12  # every bucket shows the new export, none the old one
    assert not [rel for rel in storage_root.files() if rel.startswith(f"{COMMITS_DIR}/")]


KILLED_WRITER = """
import json, os, signal, sys
from prx_data.export import commit
from prx_data.export.shard_writer import write_shards
from prx_data_tests.export.conftest import BUCKETS, SMALL, jpeg_bytes, make_samples
root, options, run_id = sys.argv[1], json.loads(sys.argv[2]) or None, sys.argv[3]
commit.begin(root, "alpha", run_id, options)
write_shards(make_samples("alpha", 40, seed=5), mds_root=root, source="alpha", run_id=run_id, tag="p1", config=SMALL, storage_options=options)
os.kill(os.getpid(), signal.SIGKILL)  # after every shard is written, before the publish
"""


def test_run_killed_between_shard_writes_and_publish(storage_root: StorageRoot) -> None:
    kw: dict[str, Any] = dict(mds_root=storage_root.base, source="alpha", storage_options=storage_root.options, config=SMALL)
    first = write_partition(make_samples("alpha", 30, seed=1), **kw)
    before = _published(storage_root)
    killed = new_run_id()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_WRITER, storage_root.base, json.dumps(storage_root.options), killed],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    leftovers = _run_objects(storage_root, killed)
    assert any(".shard." in rel for rel in leftovers) and f"{COMMITS_DIR}/alpha.{killed}.running" in leftovers
    assert _published(storage_root) == before  # readers see the last published export, whole
    # The next run of the source cleans the killed run up before it writes.
    second = write_partition(make_samples("alpha", 10, seed=6), **kw)
    assert _run_objects(storage_root, killed) == []
    assert _run_objects(storage_root, first.run_id)  # replaced shards wait for garbage collection
    assert sum(second.samples_per_bucket.values()) == 10


def _writer_heap_peak(tmp_path: Path, n: int) -> tuple[int, int]:
    """Python heap peak of one writer of ``n`` samples whose lineage goes to a sink, and the
    rows the sink got."""
    import tracemalloc

    from prx_data.export.shard_writer import write_shards

    image = jpeg_bytes(1)
    got = [0]

    def sink(table) -> None:
        got[0] += table.num_rows

    def samples():
        for i in range(n):
            tier, height, width = BUCKETS[i % len(BUCKETS)]
            yield {
                "tier": tier,
                "height": height,
                "width": width,
                "image": image,
                "caption": "c",
                "sample_id": f"s-{i:032d}",
                "source": "alpha",
                "original_width": 1,
                "original_height": 1,
                "label": "visual",
                "caption_model": "m",
            }

    config = MdsWriterConfig(size_limit=200_000, max_buffered_bytes=10_000_000)
    tracemalloc.start()
    try:
        written = write_shards(
            samples(), mds_root=str(tmp_path / f"r{n}"), source="alpha", run_id=new_run_id(), tag="p0", config=config, lineage_sink=sink
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert written.lineage_rows == got[0] == n and written.lineage.num_rows == 0
    return peak, got[0]


def test_writer_holds_the_open_shards_ids_not_the_parts(tmp_path: Path) -> None:
    """A writer hands each shard's lineage on as the shard closes: its Python heap does not grow
    with the samples it writes (a list of every id written took ~100 bytes a sample)."""
    small, _ = _writer_heap_peak(tmp_path, 1_500)
    large, _ = _writer_heap_peak(tmp_path, 6_000)
    assert large < small + 150_000, f"4x the samples took {large - small} more bytes of Python heap ({small} -> {large})"
