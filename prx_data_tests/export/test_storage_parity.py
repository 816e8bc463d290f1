"""Every feature that reads or writes beside the Lance tables gives the same answer on a local
root and on an object store (moto S3 with credentials and its own endpoint), through the one
storage layer (``prx_data.core.storage``).

Two corpora per root, each built once for the module:

* ``worlds``: two sources through ingest, captions, export, corpus index and an opt-out, by the
  plain stage functions. An object-store export names its shards by run, so files that record
  shard names differ by construction; answers are compared (data card bytes, report counts,
  lineage skips, explorer skip views, opt-outs, loader, corpus index, maintenance).
* ``trees``: the same MDS shards and source indexes copied onto both roots; everything written
  from there (merged indexes, unpublished notes, skip-list sidecars and manifests) must be
  byte-identical, and the loader must yield the same batches in the same order.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from streaming.base.util import clean_stale_shared_memory

from prx_data.core.ids import sample_id
from prx_data.core.storage import glob_files, locate, read_bytes, write_bytes
from prx_data_tests.storage_parity import KINDS, StorageRoot

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

GENERATED = datetime(2026, 1, 1, tzinfo=UTC)
RUN_PREFIX = re.compile(r"\d{8}T\d{6}-[0-9a-f]{8}\.")
OPTED_OUT = sample_id("s1", "b")
COPY_PAIR = {sample_id("s1", "a"), sample_id("s2", "x")}  # byte-identical images in two sources


def _no_run(text: str | None) -> str | None:
    """Shard names without the run prefix an object-store export gives them."""
    return None if text is None else RUN_PREFIX.sub("", text)


@pytest.fixture(scope="module")
def streaming_env(storage_roots):
    """streaming's boto3 client reads the endpoint and keys from the environment."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in storage_roots["s3"].streaming_env().items():
            patch.setenv(name, value)
        yield


# World: the pipeline on each root ---------------------------------------------------------------
def _build_world(root: StorageRoot, folder: Path) -> dict:
    from prx_data.curation.refresh import refresh
    from prx_data.curation.report import build_data_card
    from prx_data_tests.curation.optout_world import Item, World

    world = World(root=folder, lance_root=root.uri("world", "lance"), mds_root=root.uri("world", "mds"), options=root.options)
    world.sources["s1"] = {
        "a": Item((0, "exact"), "https://a.example.org/a.jpg"),
        "b": Item((1, "exact"), "https://a.example.org/b.jpg"),
        "c": Item((3, "exact"), "https://a.example.org/c.jpg"),
    }
    world.sources["s2"] = {"x": Item((0, "exact"), "https://b.example.net/x.jpg"), "y": Item((2, "half"), "https://b.example.net/y.jpg")}
    for name in world.sources:
        world.chain(name)
    world.merge()
    (folder / "optout" / "req-1.yaml").write_text(yaml.safe_dump({"id": "req-1", "source_keys": ["s1:b"]}))
    applied = refresh(world.paths, world.optout_dir, world.priorities(), exclude_labels=(), options=root.options, write_card=False)
    card = build_data_card(world.paths, sorted(world.sources), options=root.options, generated_at=GENERATED)
    card_path = card.write(world.paths.mds_root, root.options)
    return {"root": root, "world": world, "applied": applied, "card": card, "card_bytes": read_bytes(locate(card_path, root.options))}


@pytest.fixture(scope="module")
def worlds(storage_roots, tmp_path_factory, streaming_env) -> dict[str, dict]:
    return {kind: _build_world(root, tmp_path_factory.mktemp(f"world-{kind}")) for kind, root in storage_roots.items()}


def _expected_skipped(world) -> tuple[set[str], set[str]]:
    exported, dedup = world.exported_and_dedup()
    return exported, (dedup | {OPTED_OUT}) & exported


def test_data_card_and_report_counts_are_equal(worlds) -> None:
    from prx_data.export.skiplist import iter_root_sidecars

    local, remote = worlds["local"], worlds["s3"]
    assert local["card_bytes"] == remote["card_bytes"] == local["card"].markdown.encode()
    exported, skipped = _expected_skipped(local["world"])
    assert len(COPY_PAIR & skipped) == 1 and OPTED_OUT in skipped
    for built in worlds.values():
        assert built["card"].totals == {"exported": len(exported), "skipped": len(skipped), "trainable": len(exported - skipped)}
    reasons = {
        kind: Counter(sc.reason for sc in iter_root_sidecars(b["world"].mds_root, b["root"].options) for _ in sc.sample_ids)
        for kind, b in worlds.items()
    }
    assert reasons["local"] == reasons["s3"] and set(reasons["local"]) == {"dedup", "optout:req-1"}


def test_spilled_dedup_equals_the_materialised_dedup_on_both_roots(worlds, tmp_path) -> None:
    """Issue 21 item 3: dedup streamed from Lance into one-row partitions finds what the whole
    corpus in memory finds, on a local and an s3:// root (the cross-source copy included)."""
    from prx_data.curation.exclusion import dedup_config, dedup_rows, exported_samples, spilled_dedup_rows
    from prx_data.imaging.buckets import BucketConfig

    found = {}
    for kind, built in worlds.items():
        world, options = built["world"], built["root"].options
        for radius in (0, 2):
            cfg = dedup_config(BucketConfig(), radius)
            expected = dedup_rows(exported_samples(world.paths, world.priorities(), options), cfg)
            spilled = spilled_dedup_rows(world.paths, world.priorities(), cfg, options, max_partition_rows=1, scratch_dir=str(tmp_path))
            assert spilled.equals(expected)
            found[(kind, radius)] = set(spilled["sample_id"].to_pylist())
    assert found[("local", 0)] == found[("s3", 0)] and len(COPY_PAIR & found[("local", 0)]) == 1
    assert list(tmp_path.iterdir()) == []


def test_one_streamed_scan_gives_the_materialised_skips_on_both_roots(worlds, tmp_path) -> None:
    """Issue 21 item 3: labels and opt-outs joined per buffered batch of dedup's one scan (a
    buffer per batch here) equal the joins over the materialised exports, on both roots."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from prx_data.curation.exclusion import (
        SKIP_SCHEMA,
        dedup_config,
        exported_samples,
        label_rows,
        optout_rows,
        optout_samples,
        scan_skips,
        spilled_dedup_rows,
        superseded_rows,
    )
    from prx_data.imaging.buckets import BucketConfig

    order = [("shard", "ascending"), ("index_in_shard", "ascending"), ("reason", "ascending"), ("sample_id", "ascending")]
    for built in worlds.values():
        world, options = built["world"], built["root"].options
        paths, prios = world.paths, world.priorities()
        exports = exported_samples(paths, prios, options)
        # The world labels nothing, so the label join is exercised here only for its empty case.
        labels = ("nsfw",)
        expected = pa.concat_tables(
            [
                spilled_dedup_rows(paths, prios, dedup_config(BucketConfig()), options, scratch_dir=str(tmp_path)),
                label_rows(exports, paths, prios, labels, options),
                optout_rows(exports, optout_samples(paths, exports, prios, options)),
                superseded_rows(paths, prios, options),
            ]
        ).cast(SKIP_SCHEMA)
        scan = scan_skips(
            paths,
            prios,
            bucket_cfg=BucketConfig(),
            exclude_labels=labels,
            options=options,
            placements=True,
            min_buffer_rows=1,
            scratch_dir=str(tmp_path),
        )
        assert scan.skips.sort_by(order).equals(expected.sort_by(order))
        assert "optout:req-1" in pc.unique(scan.skips["reason"]).to_pylist()
        assert scan.exported == exports.num_rows
        names = scan.placements.column_names
        assert scan.placements.sort_by("sample_id").equals(exports.select(names).cast(scan.placements.schema).sort_by("sample_id"))
    assert list(tmp_path.iterdir()) == []


def test_lineage_reports_the_same_skips(worlds) -> None:
    from prx_data.curation.lineage import find

    found = {}
    for kind, built in worlds.items():
        world = built["world"]
        records = find(world.paths, sorted(world.sources), source_key="s1:b", options=built["root"].options)
        found[kind] = [
            (_no_run(p.shard), p.index_in_shard, [(s["reason"], _no_run(s["sidecar"]), s["kept_sample_id"]) for s in p.skipped])
            for r in records
            for p in r.placements
        ]
    assert found["local"] == found["s3"]
    assert [reason for _, _, skips in found["local"] for reason, _, _ in skips] == ["optout:req-1"]


def test_explorer_sees_the_same_skips_sources_and_shards(worlds) -> None:
    from prx_data.core.settings import Settings
    from prx_data.explorer.catalog import Catalog
    from prx_data.explorer.samples import placements
    from prx_data.explorer.skips import SkipIndex

    views = {}
    for kind, built in worlds.items():
        world, root = built["world"], built["root"]
        snapshot = SkipIndex(world.mds_root, ttl_s=0, storage_options=root.options).snapshot()
        assert snapshot.errors == ()
        settings = Settings(
            data_root=root.base,
            sources_dir=str(world.root / "sources"),
            optout_dir=world.optout_dir,
            lance_root=world.lance_root,
            mds_root=world.mds_root,
            storage_options=root.options or {},
        )
        catalog = Catalog(settings)
        shards = [(p.shard_exists, _no_run(p.shard)) for p in placements(catalog, "s1", OPTED_OUT)]
        views[kind] = (
            {sid: sorted((e.reason, _no_run(e.shard), e.index_in_shard) for e in entries) for sid, entries in snapshot.by_sample.items()},
            catalog.sources(),
            shards,
        )
    assert views["local"] == views["s3"]
    by_sample, sources, shards = views["local"]
    assert set(by_sample) == _expected_skipped(worlds["local"]["world"])[1]
    assert sources == {"s1", "s2"} and shards and all(exists for exists, _ in shards)


def test_optouts_apply_the_same(worlds) -> None:
    applied = {kind: b["applied"] for kind, b in worlds.items()}
    summary = {kind: (a.optouts.summary_lines(), a.skipped_samples, a.optouts.requests) for kind, a in applied.items()}
    assert summary["local"] == summary["s3"]
    assert summary["local"][2] == 1 and any("req-1" in line for line in summary["local"][0])


def test_loader_yields_the_same_samples(worlds, tmp_path) -> None:
    from prx_data.training.loader import make_loader

    yielded = {}
    for kind, built in worlds.items():
        clean_stale_shared_memory()
        loader = make_loader(
            built["world"].mds_root, batch_size=1, shuffle=False, storage_options=built["root"].options, cache_dir=str(tmp_path / kind)
        )
        yielded[kind] = sorted(sid for batch in loader for sid in batch["sample_id"])
        del loader
        clean_stale_shared_memory()
    exported, skipped = _expected_skipped(worlds["local"]["world"])
    assert yielded["local"] == yielded["s3"] == sorted(exported - skipped)


def test_corpus_index_publishes_the_same_buckets(worlds) -> None:
    from prx_data.export.corpus_index import unpublished_buckets
    from prx_data.training.loader import published_buckets

    seen = {
        kind: (
            [(b.rel, b.samples, b.unskipped) for b in published_buckets(b_["world"].mds_root, b_["root"].options)],
            unpublished_buckets(b_["world"].mds_root, b_["root"].options),
        )
        for kind, b_ in worlds.items()
    }
    assert seen["local"] == seen["s3"] and seen["local"][0]


def test_maintenance_reports_the_same(worlds) -> None:
    from prx_data.curation.maintenance import EXPORT_INDEXES, SOURCE_INDEXES, maintain_table

    reports = {}
    for kind, built in worlds.items():
        world, options = built["world"], built["root"].options
        out = []
        for name in sorted(world.sources):
            for uri, indexes in ((world.paths.raw_table(name), SOURCE_INDEXES), (world.paths.exports_table(name), EXPORT_INDEXES)):
                r = maintain_table(uri, target_rows_per_fragment=1000, indexes=indexes, options=options)
                out.append((r.rows, r.fragments_after, r.compacted, r.indexes))
        reports[kind] = out
    assert reports["local"] == reports["s3"] and all(rows for rows, *_ in reports["local"])


# Trees: the same shards on each root ------------------------------------------------------------
def _copy_tree(src: str, dst: StorageRoot) -> None:
    source = locate(src)
    target = locate(dst.uri("trees", "mds"), dst.options)
    for rel in glob_files(source, "*", recursive=True):
        if not rel.startswith("_commits/"):
            write_bytes(target.child(rel), read_bytes(source.child(rel)))


@pytest.fixture(scope="module")
def trees(storage_roots, tmp_path_factory, streaming_env):
    from prx_data.export.corpus_index import merge_all
    from prx_data.export.mds_writer import write_partition
    from prx_data.export.skiplist import build_skiplists
    from prx_data_tests.export.conftest import SMALL, make_samples
    from prx_data_tests.export.test_skiplist import skip_table

    scratch = tmp_path_factory.mktemp("tree-src")
    lineage = {
        name: write_partition(make_samples(name, n, seed=n), mds_root=str(scratch), source=name, config=SMALL).lineage
        for name, n in (("alpha", 40), ("beta", 25))
    }
    alpha = lineage["alpha"]
    picks = {"label:nsfw": [0, 1, 7], "dedup": [3], "optout:req/42": [1, 20]}
    table = skip_table(alpha, picks, kept={3: lineage["beta"]["sample_id"][0].as_py()})
    out: dict[str, Any] = {}
    for kind, root in storage_roots.items():
        _copy_tree(str(scratch), root)
        mds = root.uri("trees", "mds")
        merge_all(mds, root.options, gc_min_age_s=0)
        report = build_skiplists(table, mds, storage_options=root.options)
        # Publish only the largest bucket: the others get an unpublished.json to compare too.
        largest = max(m.unskipped for m in merge_all(mds, root.options, gc_min_age_s=0))
        merged = merge_all(mds, root.options, min_stream_samples=largest, gc_min_age_s=0)
        out[kind] = {"root": root, "report": report, "merged": merged}
    out["skipped"] = {alpha["sample_id"][i].as_py() for positions in picks.values() for i in positions}
    out["all"] = {sid for t in lineage.values() for sid in t["sample_id"].to_pylist()}
    return out


def test_written_files_are_byte_identical(trees) -> None:
    local, remote = (trees[kind]["root"].files("trees", "mds") for kind in KINDS)
    assert local.keys() == remote.keys()
    written = [rel for rel in local if rel.endswith(("index.json", "unpublished.json", "skiplists.json")) or ".skip." in rel]
    assert any(".skip." in rel for rel in written) and any(rel.endswith("/unpublished.json") for rel in written)
    assert any(rel.count("/") == 2 and rel.endswith("/index.json") for rel in written)  # a merged bucket index
    assert [rel for rel in written if local[rel] != remote[rel]] == []


def test_skip_list_builds_report_the_same(trees) -> None:
    reports = {kind: trees[kind]["report"] for kind in KINDS}
    local, remote = reports["local"], reports["s3"]
    assert (local.written, local.removed, local.manifests_written) == (remote.written, remote.removed, remote.manifests_written)
    assert local.counts.equals(remote.counts) and local.streams.equals(remote.streams) and local.written >= 4
    merged = {kind: [(m.num_samples, m.unskipped, m.published) for m in trees[kind]["merged"]] for kind in KINDS}
    assert merged["local"] == merged["s3"] and not all(published for *_, published in merged["local"])


def test_skip_lists_read_back_the_same(trees) -> None:
    from prx_data.export.skiplist import load_bucket_skips
    from prx_data.export.tree import list_buckets

    loaded = {}
    for kind in KINDS:
        root = trees[kind]["root"]
        mds = root.uri("trees", "mds")
        loaded[kind] = {
            ref.rel: {shard: idx.tolist() for shard, idx in load_bucket_skips(ref.dir(mds), storage_options=root.options).skipped.items()}
            for ref in list_buckets(mds, root.options)
        }
    assert loaded["local"] == loaded["s3"]
    assert sum(len(v) for bucket in loaded["local"].values() for v in bucket.values()) == len(trees["skipped"])


def test_loader_batches_are_identical(trees, tmp_path) -> None:
    from prx_data.training.loader import make_loader

    batches = {}
    for kind in KINDS:
        root = trees[kind]["root"]
        clean_stale_shared_memory()
        loader = make_loader(
            root.uri("trees", "mds"), batch_size=2, shuffle_seed=7, storage_options=root.options, cache_dir=str(tmp_path / kind)
        )
        batches[kind] = [list(batch["sample_id"]) for batch in loader]
        del loader
        clean_stale_shared_memory()
    assert batches["local"] == batches["s3"] and batches["local"]
    seen = {sid for batch in batches["local"] for sid in batch}
    assert not seen & trees["skipped"] and seen <= trees["all"]


def test_storage_root_fixture_writes_the_same_bytes(storage_root: StorageRoot) -> None:
    """The plain layer itself, once per kind: whole-object writes, no-op rewrites, listing."""
    from prx_data.core.storage import glob_entries, write_if_changed

    loc = locate(storage_root.uri("a", "b", "x.skip.r.json"), storage_root.options)
    assert write_if_changed(loc, b"one") is True and write_if_changed(loc, b"one") is False
    write_bytes(locate(storage_root.uri("a", "y.json"), storage_root.options), b"two")
    entries = glob_entries(locate(storage_root.uri("a"), storage_root.options), "*.json", recursive=True)
    assert [(e.name, e.size) for e in entries] == [("b/x.skip.r.json", 3), ("y.json", 3)]
    assert storage_root.files("a") == {"b/x.skip.r.json": b"one", "y.json": b"two"}
