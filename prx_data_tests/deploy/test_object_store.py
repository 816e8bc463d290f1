"""Lance and MDS roots on s3:// (moto server): ingest, phash and export with plain functions
(executor='local', no Ray), then stream the shards back from the object store with
mosaicml-streaming; and the MDS publish's all-or-nothing promise on an object store."""

from __future__ import annotations

import io
from pathlib import Path

import lance
import pytest
from PIL import Image
from streaming import StreamingDataset
from streaming.base.util import clean_stale_shared_memory

from prx_data.core.paths import StoragePaths
from prx_data.core.settings import load_settings
from prx_data.core.storage import locate, streaming_env, try_read_bytes
from prx_data.export import commit, shard_writer
from prx_data.export.commit import COMMITS_DIR
from prx_data.export.corpus_index import merge_all
from prx_data.export.mds_writer import write_partition
from prx_data.export.tree import list_buckets, list_sources
from prx_data.imaging.buckets import Assignment, assign
from prx_data.ingest.driver import ingest_source
from prx_data.ingest.registry import load_registry
from prx_data.stages.export_stage import export_source
from prx_data.stages.phash_stage import compute_phashes
from prx_data_tests import images
from prx_data_tests.export.conftest import SMALL, make_samples

# (width, height): 512-tier photos of three shapes, one that bucketing drops (too small) and a
# broken file that ingest keeps as an invalid row.
PHOTOS = {
    "land/a.jpg": (640, 480),
    "land/b.jpg": (660, 500),
    "port/c.jpg": (480, 640),
    "square/d.jpg": (600, 600),
    "square/e.jpg": (620, 620),
    "tiny/f.jpg": (100, 80),
}


def _keys(client, bucket: str, prefix: str) -> list[str]:
    """Object keys, without the empty 'folder/' markers that Arrow's S3 filesystem leaves."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(obj["Key"] for page in pages for obj in page.get("Contents", ()) if not obj["Key"].endswith("/"))


def test_ingest_and_export_with_both_roots_on_s3(tmp_path: Path, s3_server, s3_bucket, clean_prx_env):
    monkeypatch = clean_prx_env
    data_root = tmp_path / "data"
    folder = tmp_path / "photos"
    for i, (rel, (w, h)) in enumerate(PHOTOS.items()):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(images.jpeg(w, h, seed=i))
    (folder / "broken.jpg").write_bytes(images.truncated_jpeg())
    (data_root / "sources").mkdir(parents=True)
    (data_root / "sources" / "photos.yaml").write_text(f"name: photos\nshape: image_folder\nlocation: {folder}\n")
    env = s3_server.env(
        PRX_DATA_ROOT=str(data_root),
        PRX_LANCE_ROOT=f"s3://{s3_bucket}/lance",
        PRX_MDS_ROOT=f"s3://{s3_bucket}/mds",
    )
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.storage_options["aws_endpoint"] == s3_server.endpoint
    paths = StoragePaths.from_settings(settings)
    options = settings.storage_options

    source = load_registry(settings.sources_dir).get("photos")
    ingest = ingest_source(source, paths.raw_table("photos"), storage_options=options)
    assert ingest.rows_by_status == {"ok": len(PHOTOS), "invalid_image": 1}
    hashed = compute_phashes(paths.raw_table("photos"), executor="local", storage_options=options)
    assert hashed.processed == len(PHOTOS)
    stats = export_source(
        paths.raw_table("photos"),
        "photos",
        mds_root=settings.mds_root,
        exports_uri=paths.exports_table("photos"),
        executor="local",
        require_caption=False,  # the captions stage is not part of this test
        storage_options=options,
        scratch_dir=str(tmp_path),
    )
    assert stats.exported == 5 and dict(stats.dropped) == {"too_small": 1}, stats
    merged = merge_all(settings.mds_root, options, gc_min_age_s=0)
    assert sum(m.num_samples for m in merged) == 5

    # Everything landed in the bucket; nothing but the specs under the local data root, and the
    # export's scratch copy is gone.
    keys = _keys(s3_server.client(), s3_bucket, "")
    assert any(k.startswith("lance/sources/photos.lance/") for k in keys)
    assert any(k.startswith("lance/exports/photos.lance/") for k in keys)
    assert sorted(p.name for p in data_root.iterdir()) == ["sources"]
    assert not list(tmp_path.glob("prx-mds-*"))
    assert not [k for k in keys if k.startswith(f"mds/{COMMITS_DIR}/")], "journal and in-flight marker are removed"
    buckets = list_buckets(settings.mds_root, options)
    expected = {assign(w, h) for w, h in PHOTOS.values()} - {assign(100, 80)}
    assert all(isinstance(a, Assignment) for a in expected)
    assert {ref.rel for ref in buckets} == {f"{a.tier}/{a.bucket}" for a in expected if isinstance(a, Assignment)}
    assert all(list_sources(ref.dir(settings.mds_root), options) == ["photos"] for ref in buckets)

    # Lineage (read from the Lance exports table on s3) names published objects that exist.
    exports = lance.dataset(paths.exports_table("photos"), storage_options=options).to_table().to_pylist()
    lineage = {r["sample_id"]: r for r in exports if r["shard"]}
    assert len(lineage) == 5 and all(r["phash"] is not None for r in lineage.values())
    assert all(f"mds/{r['shard']}" in keys for r in lineage.values())

    # Stream every bucket back from s3 with a plain StreamingDataset (remote + local cache).
    for name, value in streaming_env(options).items():
        monkeypatch.setenv(name, value)
    clean_stale_shared_memory()
    seen = {}
    for ref in buckets:
        dataset = StreamingDataset(
            remote=f"{settings.mds_root}/{ref.rel}", local=str(tmp_path / "cache" / ref.rel), shuffle=False, batch_size=1
        )
        for sample in dataset:
            image = Image.open(io.BytesIO(sample["image"]))
            assert image.format == "JPEG" and (image.height, image.width) == (ref.height, ref.width)
            assert sample["source"] == "photos"
            seen[sample["sample_id"]] = ref.rel
        del dataset
    clean_stale_shared_memory()
    assert seen == {sid: f"{r['tier']}/{r['bucket']}" for sid, r in lineage.items()}


def _source_index(root, rel: str, source: str) -> bytes | None:
    return try_read_bytes(root.child(rel, source, "index.json"))


def test_publish_is_all_or_nothing_and_rolls_forward(s3_server, s3_bucket, tmp_path, monkeypatch):
    options = s3_server.options()
    mds_root = f"s3://{s3_bucket}/mds"
    root = locate(mds_root, options)
    client = s3_server.client()

    first = write_partition(make_samples("alpha", 30, seed=1), mds_root=mds_root, source="alpha", storage_options=options, config=SMALL)
    merge_all(mds_root, options, gc_min_age_s=0)
    rels = [ref.rel for ref in first.buckets]
    published = {rel: _source_index(root, rel, "alpha") for rel in rels}
    first_objects = {k for k in _keys(client, s3_bucket, "mds/") if f"/{first.run_id}." in k}
    assert len(first_objects) >= len(rels)  # at least one shard per bucket; staged indexes are gone

    # Fails while moving shards into the root (before the commit point): readers see the first
    # export, and the run deletes what it had moved there.
    real_upload = shard_writer.upload_file
    calls = {"n": 0}

    def flaky_upload(local_path, loc):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("connection reset")
        return real_upload(local_path, loc)

    monkeypatch.setattr(shard_writer, "upload_file", flaky_upload)
    with pytest.raises(OSError, match="connection reset"):
        write_partition(make_samples("alpha", 20, seed=2), mds_root=mds_root, source="alpha", storage_options=options, config=SMALL)
    monkeypatch.setattr(shard_writer, "upload_file", real_upload)
    assert calls["n"] == 2, "the failed run moved a shard into the root before failing"
    assert {rel: _source_index(root, rel, "alpha") for rel in rels} == published
    assert not _keys(client, s3_bucket, f"mds/{COMMITS_DIR}/")
    orphans = {k for k in _keys(client, s3_bucket, "mds/") if k not in first_objects and not k.endswith("index.json")}
    assert not orphans

    # Dies after the commit point, before any bucket flipped: still the first export for
    # readers; the next export of the source rolls the committed one forward first.
    real_apply = commit._apply

    def killed(root_loc, journal):
        raise KeyboardInterrupt("killed after commit")

    monkeypatch.setattr(commit, "_apply", killed)
    with pytest.raises(KeyboardInterrupt):
        write_partition(make_samples("alpha", 20, seed=3), mds_root=mds_root, source="alpha", storage_options=options, config=SMALL)
    monkeypatch.setattr(commit, "_apply", real_apply)
    assert {rel: _source_index(root, rel, "alpha") for rel in rels} == published
    assert f"mds/{COMMITS_DIR}/alpha.json" in _keys(client, s3_bucket, f"mds/{COMMITS_DIR}/")

    assert commit.recover(mds_root, "alpha", options)["rolled_forward"]
    assert not _keys(client, s3_bucket, f"mds/{COMMITS_DIR}/")
    indexes = {ref.rel: _source_index(root, ref.rel, "alpha") for ref in list_buckets(mds_root, options)}
    live = {rel: raw for rel, raw in indexes.items() if raw is not None}
    assert live and all(raw != published.get(rel) for rel, raw in live.items())
    assert sum(info["samples"] for raw in live.values() for info in __import__("json").loads(raw)["shards"]) == 20

    # The replaced export's shards survive one merge (a trainer may hold the previous merged
    # index) and are collected by the next.
    merge_all(mds_root, options, gc_min_age_s=0)
    assert first_objects & set(_keys(client, s3_bucket, "mds/"))
    merge_all(mds_root, options, gc_min_age_s=0)
    remaining = set(_keys(client, s3_bucket, "mds/"))
    assert not {k for k in first_objects if not k.endswith("/index.json")} & remaining
