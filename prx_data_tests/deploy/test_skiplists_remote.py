"""Skip lists on an s3:// MDS root (moto server): build_skiplists writes the same sidecars and
manifest as on a local tree, rewrites only what changed, removes sidecars that no longer apply,
and PrxStreamingDataset over the remote bucket streams never yields a skipped sample."""

from __future__ import annotations

import gc
from pathlib import Path

from streaming.base.util import clean_stale_shared_memory

from prx_data.core.storage import locate, read_bytes, streaming_env
from prx_data.export.corpus_index import merge_all
from prx_data.export.mds_writer import write_partition
from prx_data.export.skiplist import MANIFEST_BASENAME, SKIP_INFIX, build_skiplists, iter_root_sidecars
from prx_data.export.tree import list_buckets, list_sources
from prx_data.training.loader import PrxStreamingDataset
from prx_data_tests.export.conftest import SMALL, make_samples
from prx_data_tests.export.test_skiplist import skip_table


def _keys(client, bucket: str, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(obj["Key"] for page in pages for obj in page.get("Contents", ()) if not obj["Key"].endswith("/"))


def _stream_all(mds_root: str, rels: list[str], cache: Path) -> tuple[list[str], int]:
    """Every sample id the loader yields over the remote bucket streams, and its skipped count."""
    clean_stale_shared_memory()
    seen: list[str] = []
    skipped = 0
    for rel in rels:
        ds = PrxStreamingDataset(remote=f"{mds_root}/{rel}", local=str(cache / rel), shuffle=False, batch_size=1)
        skipped += ds.num_skipped
        seen.extend(sample["sample_id"] for sample in ds)
        del ds
        gc.collect()
    clean_stale_shared_memory()
    return seen, skipped


def test_skiplists_on_s3_root_are_honoured_by_the_remote_loader(tmp_path: Path, s3_server, s3_bucket, clean_prx_env):
    monkeypatch = clean_prx_env
    options = s3_server.options()
    mds_root = f"s3://{s3_bucket}/mds"
    client = s3_server.client()
    export = write_partition(make_samples("alpha", 30, seed=1), mds_root=mds_root, source="alpha", storage_options=options, config=SMALL)
    merge_all(mds_root, options, gc_min_age_s=0)
    lineage = export.lineage
    rels = sorted(ref.rel for ref in list_buckets(mds_root, options))
    assert len(rels) >= 2 and lineage.num_rows == 30

    # Skip samples in two buckets; one sample for two reasons, one dedup row with a kept id.
    bucket_of = [f"{r['tier']}/{r['bucket']}" for r in lineage.to_pylist()]
    first = [i for i, b in enumerate(bucket_of) if b == rels[0]]
    second = [i for i, b in enumerate(bucket_of) if b == rels[1]]
    picks = {"label:nsfw": [first[0], second[0]], "dedup": [first[1]], "optout:req/42": [first[0]]}
    table = skip_table(lineage, picks, kept={first[1]: "kept-copy"})
    skipped_ids = {lineage["sample_id"][p].as_py() for positions in picks.values() for p in positions}
    assert len(skipped_ids) == 3

    report = build_skiplists(table, mds_root, storage_options=options)
    sidecars = [k for k in _keys(client, s3_bucket, "mds/") if SKIP_INFIX in k]
    assert report.written == len(sidecars) == 4 and report.unchanged == report.removed == 0
    assert report.manifests_written == len(rels)  # every bucket, also those with nothing skipped
    assert all(f"mds/{rel}/{MANIFEST_BASENAME}" in _keys(client, s3_bucket, "mds/") for rel in rels)
    assert any("optout_3Areq_2F42" in k for k in sidecars)

    # Same names and bytes as a local tree with the same index.json files gives.
    root = locate(mds_root, options)
    local_root = tmp_path / "local"
    for rel in rels:
        for source in list_sources(f"{mds_root}/{rel}", options):
            target = local_root / rel / source / "index.json"
            target.parent.mkdir(parents=True)
            target.write_bytes(read_bytes(root.child(rel, source, "index.json")))
    local_report = build_skiplists(table, str(local_root))
    assert (local_report.written, local_report.manifests_written) == (report.written, report.manifests_written)
    local_files = {p.relative_to(local_root).as_posix(): p.read_bytes() for p in local_root.rglob("*.json") if p.name != "index.json"}
    remote_files = {
        k.removeprefix("mds/"): read_bytes(root.child(k.removeprefix("mds/")))
        for k in _keys(client, s3_bucket, "mds/")
        if SKIP_INFIX in k or k.endswith(f"/{MANIFEST_BASENAME}")
    }
    assert remote_files == local_files
    assert report.counts.equals(local_report.counts) and report.streams.equals(local_report.streams)

    # What the data card, the CLI summary and lineage count: the same sidecars from both roots.
    def walked(root_uri, opts=None):
        return sorted((sc.path, sc.reason, tuple(sc.indices), tuple(sc.sample_ids)) for sc in iter_root_sidecars(root_uri, opts))

    assert walked(mds_root, options) == walked(str(local_root)) and len(walked(mds_root, options)) == 4
    assert {sid for *_, sids in walked(mds_root, options) for sid in sids} == skipped_ids

    # Same table again: nothing is rewritten.
    again = build_skiplists(table, mds_root, storage_options=options)
    assert (again.written, again.unchanged, again.removed, again.manifests_written) == (0, 4, 0, 0)

    # The loader over the remote streams yields every sample but the skipped ones.
    for name, value in streaming_env(options).items():
        monkeypatch.setenv(name, value)
    seen, num_skipped = _stream_all(mds_root, rels, tmp_path / "cache1")
    assert num_skipped == len(skipped_ids)
    assert not skipped_ids & set(seen)
    assert sorted(seen) == sorted(set(lineage["sample_id"].to_pylist()) - skipped_ids)

    # Drop the label reason: its sidecars are deleted from the bucket and those samples return.
    smaller = {k: v for k, v in picks.items() if k != "label:nsfw"}
    report = build_skiplists(skip_table(lineage, smaller, kept={first[1]: "kept-copy"}), mds_root, storage_options=options)
    assert (report.written, report.unchanged, report.removed) == (0, 2, 2)
    assert not [k for k in _keys(client, s3_bucket, "mds/") if "label_3Ansfw" in k]
    still = {lineage["sample_id"][p].as_py() for positions in smaller.values() for p in positions}
    seen, num_skipped = _stream_all(mds_root, rels, tmp_path / "cache2")
    assert num_skipped == len(still) == 2
    assert sorted(seen) == sorted(set(lineage["sample_id"].to_pylist()) - still)
