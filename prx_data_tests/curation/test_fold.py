"""Opt-in fold policy: a sparse bucket's images are re-exported into the nearest published
bucket of the same tier, the originals are skipped as 'folded', and the loader, the publication
and the data card follow; a re-run with nothing new does no image work.

The corpus (tier 512, ``MIN`` = 4): aspect index 8 (576x464) and 6 (512x512) are published,
index 9 (608x432) holds 2 samples, one grid step from 576x464, and index 0 (368x720) one
sample, 6 steps from anything published (refused at the default 2 steps)."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from PIL import Image

from prx_data.core.ids import sample_id
from prx_data.core.lance_io import open_table
from prx_data.core.paths import StoragePaths
from prx_data.curation import fold as fold_mod
from prx_data.curation.exclusion import compute_skips, write_skip_lists
from prx_data.curation.fold import FOLDED, FoldPolicy, apply_fold_policy, read_folds
from prx_data.curation.report import build_data_card
from prx_data.export.corpus_index import merge_all, unpublished_buckets
from prx_data.export.mds_writer import MdsWriterConfig
from prx_data.imaging import transform
from prx_data.imaging.buckets import BucketConfig, fold_kept_share, fold_target
from prx_data.stages.export_stage import export_source
from prx_data.training.loader import make_loader
from prx_data_tests.export.rawtables import write_raw
from prx_data_tests.export.trainable import release

MIN = 4
ON = FoldPolicy(enabled=True, max_steps=2, min_stream_samples=MIN)
OFF = FoldPolicy(enabled=False, max_steps=2, min_stream_samples=MIN)
SPARSE, TARGET, FAR = "512/432x608", "512/464x576", "512/720x368"


def raw_item(key: str, seed: int, w: int, h: int, label: str = "visual") -> dict:
    return {"key": key, "seed": seed, "w": w, "h": h, "caption": f"a photo {key}", "status": "ok", "label": label}


def corpus_items() -> list[dict]:
    items = [raw_item(f"wide{i}", i, 640, 480) for i in range(6)]  # index 8: published
    items += [raw_item(f"square{i}", 20 + i, 600, 600) for i in range(5)]  # index 6: published
    items += [raw_item(f"sparse{i}", 40 + i, 680, 480) for i in range(2)]  # index 9: sparse
    items += [raw_item("far0", 60, 400, 800)]  # index 0: sparse, nothing in reach
    return items


@pytest.fixture
def encodes(monkeypatch) -> list[int]:
    """Images the fold decodes and encodes (prepare() with a shape override)."""
    calls = [0]
    real = transform.prepare

    def counting(data, cfg=None, max_pixels=transform.DEFAULT_MAX_PIXELS, shape=None):
        if shape is not None:
            calls[0] += 1
        return real(data, cfg, max_pixels, shape=shape)

    monkeypatch.setattr(transform, "prepare", counting)
    return calls


def pipeline(paths: StoragePaths, policy: FoldPolicy, options: dict | None = None, scratch: str | None = None):
    """mds_shards, corpus_index, skip_lists (with the fold), the corpus job's order."""
    export_source(
        paths.raw_table("alpha"),
        "alpha",
        mds_root=paths.mds_root,
        exports_uri=paths.exports_table("alpha"),
        executor="local",
        storage_options=options,
        scratch_dir=scratch,
    )
    merge_all(paths.mds_root, options, min_stream_samples=MIN, gc_min_age_s=0)
    exports, skips = compute_skips(paths, {"alpha": 1}, bucket_cfg=BucketConfig(), options=options)
    skips, report = apply_fold_policy(
        paths,
        exports,
        skips,
        sources=["alpha"],
        bucket_cfg=BucketConfig(),
        writer_cfg=MdsWriterConfig(),
        policy=policy,
        options=options,
        run_id="test-run",
        scratch_dir=scratch,
    )
    write_skip_lists(paths.mds_root, skips, options)
    merge_all(paths.mds_root, options, min_stream_samples=MIN, gc_min_age_s=0)
    return report, skips


def epoch(root: str, options: dict | None = None, cache: str | None = None) -> dict[str, tuple[int, int]]:
    """sample_id -> (width, height) of the JPEG the project's loader yields, over one epoch."""
    seen: dict[str, tuple[int, int]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        kwargs: dict[str, Any] = {"storage_options": options, "cache_dir": cache} if options else {}
        loader = make_loader(root, batch_size=1, shuffle=False, **kwargs)
    try:
        for batch in loader:
            for sid, data in zip(batch["sample_id"], batch["image"]):
                assert sid not in seen, f"{sid} yielded twice"
                seen[sid] = Image.open(io.BytesIO(data)).size
    finally:
        del loader
        release()
    return seen


def ids(*keys: str) -> set[str]:
    return {sample_id("alpha", k) for k in keys}


def tree_files(root: str) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file() and "_commits" not in p.parts}


@pytest.fixture
def paths(tmp_path: Path) -> StoragePaths:
    return StoragePaths(lance_root=str(tmp_path / "lance"), mds_root=str(tmp_path / "mds"))


def test_fold_target_prefers_the_nearest_then_the_squarer_shape():
    cfg = BucketConfig()
    assert fold_target(512, 9, [8, 6], cfg) == 8
    assert fold_target(512, 7, [6, 8], cfg) == 6, "a tie goes to the square shape"
    assert fold_target(512, 5, [4, 6], cfg) == 6
    assert fold_target(512, 0, [6], cfg) is None, "6 steps is out of reach"
    assert fold_target(512, 0, [3], cfg, max_steps=3) == 3
    assert fold_target(512, 6, [6], cfg) is None, "a bucket never folds into itself"
    assert 0.88 < fold_kept_share(1, cfg) < 0.9 and 0.79 < fold_kept_share(2, cfg) < 0.8


def test_policy_off_changes_nothing(paths: StoragePaths, encodes):
    write_raw(paths.raw_table("alpha"), "alpha", corpus_items())
    report, skips = pipeline(paths, OFF)
    assert (report.folded, report.folds, encodes[0]) == (0, {}, 0)
    assert FOLDED not in set(skips["reason"].to_pylist())
    assert not [p for p in Path(paths.mds_root).rglob("*--fold*")]
    assert open_table(paths.folds_table("alpha")) is None
    assert not Path(paths.folds_table("alpha")).with_suffix(".lock").exists(), "no lock file either"
    assert {SPARSE, FAR} <= set(unpublished_buckets(paths.mds_root))
    assert set(epoch(paths.mds_root)) == ids(*(f"wide{i}" for i in range(6)), *(f"square{i}" for i in range(5)))


def test_fold_moves_sparse_images_into_the_published_neighbour(paths: StoragePaths, encodes):
    items = corpus_items()
    write_raw(paths.raw_table("alpha"), "alpha", items)
    report, skips = pipeline(paths, ON)
    assert report.folds == {SPARSE: TARGET}
    assert report.refused == {FAR: 1}, "the far bucket stays unpublished"
    assert (report.folded, report.encoded, report.per_target) == (2, 2, {TARGET: 2})
    folded = skips.filter(pc.equal(skips["reason"], FOLDED))
    assert set(folded["sample_id"].to_pylist()) == ids("sparse0", "sparse1")
    assert {s.rsplit("/", 2)[0] for s in folded["shard"].to_pylist()} == {SPARSE}, "the originals are skipped"

    # The copies sit in their own partition of the target bucket, merged into its stream.
    assert Path(paths.mds_root, TARGET, "alpha--fold", "index.json").is_file()
    merged = json.loads(Path(paths.mds_root, TARGET, "index.json").read_text())
    assert any(s["raw_data"]["basename"].startswith("alpha--fold/") for s in merged["shards"])
    notes = unpublished_buckets(paths.mds_root)
    assert notes[SPARSE]["unskipped"] == 0 and FAR in notes

    seen = epoch(paths.mds_root)
    assert set(seen) == ids(*(f"wide{i}" for i in range(6)), *(f"square{i}" for i in range(5)), "sparse0", "sparse1")
    for sid in ids("sparse0", "sparse1"):
        assert seen[sid] == (576, 464), "folded into the target shape"

    # Lineage of the fold: which bucket each copy came from.
    rows = read_folds(paths, ["alpha"]).to_pylist()
    assert {r["sample_id"] for r in rows} == ids("sparse0", "sparse1")
    assert {(r["folded_from"], f"{r['tier']}/{r['bucket']}") for r in rows} == {(SPARSE, TARGET)}
    assert all(r["shard"].startswith(f"{TARGET}/alpha--fold/") for r in rows)

    card = build_data_card(paths, ["alpha"]).markdown
    assert "| folded | 2 |" in card
    assert f"| {SPARSE} | {TARGET} | 2 |" in card
    assert "14 samples exported, 0 skipped, **14 trainable**" in card, "a folded sample is trained from its copy"

    # A re-run with nothing new does no image work and writes nothing.
    before = tree_files(paths.mds_root)
    again, _ = pipeline(paths, ON)
    assert (encodes[0], again.encoded, again.reused, again.kept, again.buckets_written) == (2, 0, 0, 2, [])
    assert tree_files(paths.mds_root) == before


def test_skips_apply_to_folds_and_a_grown_bucket_takes_its_images_back(paths: StoragePaths, encodes):
    items = corpus_items()
    write_raw(paths.raw_table("alpha"), "alpha", items)
    pipeline(paths, ON)
    assert encodes[0] == 2

    # A label skip on a folded sample: its copy leaves the target, the other copy is rewritten
    # with its old bytes (no image work).
    items[11]["label"] = "text"  # sparse0
    write_raw(paths.raw_table("alpha"), "alpha", items)
    report, _ = pipeline(paths, ON)
    assert (report.folded, report.encoded, report.reused, encodes[0]) == (1, 0, 1, 2)
    seen = epoch(paths.mds_root)
    assert sample_id("alpha", "sparse0") not in seen and seen[sample_id("alpha", "sparse1")] == (576, 464)

    # The sparse bucket grows past MIN: published on its own, copies removed, originals back.
    items += [raw_item(f"sparse{i}", 40 + i, 680, 480) for i in range(2, 6)]
    write_raw(paths.raw_table("alpha"), "alpha", items)
    report, skips = pipeline(paths, ON)
    assert (report.folds, report.folded, report.encoded) == ({}, 0, 0)
    assert FOLDED not in set(skips["reason"].to_pylist())
    assert not Path(paths.mds_root, TARGET, "alpha--fold", "index.json").exists()  # unpublished; shards wait for GC
    seen = epoch(paths.mds_root)
    assert {sid for sid, size in seen.items() if size == (608, 432)} == ids(*(f"sparse{i}" for i in range(1, 6)))

    # Turning the policy off removes every fold partition.
    items = items[:15]  # back to 3 sparse samples, sparse0 labelled text: 2 to fold
    write_raw(paths.raw_table("alpha"), "alpha", items)
    assert pipeline(paths, ON)[0].folded == 2
    assert pipeline(paths, OFF)[0].folded == 0
    assert not list(Path(paths.mds_root).glob("*/*/alpha--fold/index.json"))
    assert read_folds(paths, ["alpha"]).num_rows == 0


def test_a_run_killed_after_its_commit_is_repaired(paths: StoragePaths, encodes, monkeypatch):
    write_raw(paths.raw_table("alpha"), "alpha", corpus_items())
    real = fold_mod._write_table

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed between the MDS commit and the folds table")

    monkeypatch.setattr(fold_mod, "_write_table", killed)
    with pytest.raises(KeyboardInterrupt):
        pipeline(paths, ON)
    monkeypatch.setattr(fold_mod, "_write_table", real)
    assert Path(paths.mds_root, TARGET, "alpha--fold", "index.json").is_file()
    report, _ = pipeline(paths, ON)
    assert report.folded == 2 and encodes[0] == 4, "the untracked bucket is written again"
    assert set(epoch(paths.mds_root)) >= ids("sparse0", "sparse1")


def test_lineage_shows_the_folded_copy(paths: StoragePaths):
    from prx_data.curation.lineage import find, format_record

    write_raw(paths.raw_table("alpha"), "alpha", corpus_items())
    pipeline(paths, ON)
    [record] = find(paths, ["alpha"], sample_id=sample_id("alpha", "sparse0"))
    text = format_record(record)
    assert f"folded from {SPARSE}" in text and "SKIPPED    folded" in text
    copy = [p for p in record.placements if p.folded_from]
    assert len(copy) == 1 and copy[0].bucket == "464x576" and not copy[0].skipped
    assert not record.skipped and "yielded by the loader" in text


def test_a_source_named_like_a_fold_folder_is_left_alone(paths: StoragePaths):
    """'alpha--fold' registered as a source: with the policy off its folders are not taken for
    folded copies of 'alpha' (and removed); with it on, the name is refused."""
    write_raw(paths.raw_table("alpha"), "alpha", corpus_items())
    write_raw(paths.raw_table("alpha--fold"), "alpha--fold", [raw_item("x", 1, 640, 480)])
    export_source(
        paths.raw_table("alpha--fold"),
        "alpha--fold",
        mds_root=paths.mds_root,
        exports_uri=paths.exports_table("alpha--fold"),
        executor="local",
    )
    exports, skips = compute_skips(paths, {"alpha": 1, "alpha--fold": 1}, bucket_cfg=BucketConfig())
    apply_fold_policy(paths, exports, skips, sources=["alpha", "alpha--fold"], bucket_cfg=BucketConfig(), policy=OFF)
    assert Path(paths.mds_root, TARGET, "alpha--fold", "index.json").is_file()
    with pytest.raises(ValueError, match="reserved"):
        apply_fold_policy(paths, exports, skips, sources=["alpha", "alpha--fold"], bucket_cfg=BucketConfig(), policy=ON)


def test_the_fold_reads_only_the_rows_it_folds_from_the_sources_tables(paths: StoragePaths, encodes, monkeypatch):
    """fold_source looks up the folded samples' placements and raw rows with the ids in the scan's
    filter: a source's other exports and captions are never materialised (a 50 M-row source's
    captions are tens of GB)."""
    import lance

    items = corpus_items() + [raw_item(f"more{i}", 80 + i, 640, 480) for i in range(30)]  # published, never folded
    write_raw(paths.raw_table("alpha"), "alpha", items)
    read: list[tuple[str, int]] = []
    real = lance.LanceDataset.to_table

    def counting(self, *args, **kwargs):
        table = real(self, *args, **kwargs)
        read.append((Path(self.uri).name, table.num_rows))
        return table

    monkeypatch.setattr(
        fold_mod, "fold_source", _spy(fold_mod.fold_source, lambda: monkeypatch.setattr(lance.LanceDataset, "to_table", counting))
    )
    report, _ = pipeline(paths, ON)
    assert report.folds == {SPARSE: TARGET} and report.encoded == 2
    from_sources = [(name, rows) for name, rows in read if name in ("alpha.lance",)]
    assert from_sources and max(rows for _, rows in from_sources) == 2, read  # the two folded samples, not 44 rows


def _spy(fn, on_call):
    def wrapped(*args, **kwargs):
        on_call()
        return fn(*args, **kwargs)

    return wrapped
