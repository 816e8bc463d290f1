"""Incremental export on an s3:// root (moto): a re-run with no change writes no object, new
rows are appended as new objects beside the kept ones, a changed caption re-uses the published
bytes, a run killed between publishing and its tables is completed by the next one, and the
remote loader yields exactly the source's current rows."""

from __future__ import annotations

import gc
from pathlib import Path

from streaming.base.util import clean_stale_shared_memory

from prx_data.core.ids import sample_id
from prx_data.core.paths import StoragePaths
from prx_data.core.storage import streaming_env
from prx_data.curation.exclusion import compute_skips, write_skip_lists
from prx_data.export.corpus_index import merge_all
from prx_data.export.tree import list_buckets
from prx_data.imaging.buckets import BucketConfig
from prx_data.stages.export_stage import export_source
from prx_data.training.loader import PrxStreamingDataset
from prx_data_tests.export.rawtables import item, write_raw


def _objects(client, bucket: str) -> dict[str, str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="mds/")
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", ()) if not o["Key"].endswith("/")}


def test_incremental_export_on_s3(tmp_path: Path, s3_server, s3_bucket, clean_prx_env):
    monkeypatch = clean_prx_env
    options = s3_server.options()
    paths = StoragePaths(f"s3://{s3_bucket}/lance", f"s3://{s3_bucket}/mds")
    client = s3_server.client()

    def run(**kwargs):
        stats = export_source(
            paths.raw_table("alpha"),
            "alpha",
            mds_root=paths.mds_root,
            exports_uri=paths.exports_table("alpha"),
            executor="local",
            storage_options=options,
            scratch_dir=str(tmp_path),
            **kwargs,
        )
        merge_all(paths.mds_root, options, gc_min_age_s=0)
        _, skips = compute_skips(paths, {"alpha": 1}, bucket_cfg=BucketConfig(), options=options)
        write_skip_lists(paths.mds_root, skips, options)
        return stats

    items = [item(f"k{i}", i) for i in range(9)]
    write_raw(paths.raw_table("alpha"), "alpha", items, options)
    assert run().encoded == 9
    published = _objects(client, s3_bucket)
    again = run()
    assert (again.encoded, again.changed) == (0, False)
    assert _objects(client, s3_bucket) == published, "a run with nothing new writes no object"

    items[0]["caption"] = "edited on s3"
    items.pop(2)
    items.append(item("n1", 70))
    write_raw(paths.raw_table("alpha"), "alpha", items, options)
    third = run(rewrite_share=0.9)
    assert (third.encoded, third.reused, third.kept, third.superseded) == (1, 1, 7, 2)
    now = _objects(client, s3_bucket)
    old_shards = {k: v for k, v in published.items() if k.endswith(".mds")}
    assert all(now.get(k) == v for k, v in old_shards.items()), "kept shard objects are neither copied nor rewritten"
    assert len([k for k in now if k.endswith(".mds")]) > len(old_shards)

    # Killed after publishing, before its tables: the next run supersedes the orphaned objects.
    import lance
    import pytest

    from prx_data.stages import export_stage

    def dies(*args, **kwargs):
        raise KeyboardInterrupt("killed before the tables")

    items.append(item("n2", 71))
    write_raw(paths.raw_table("alpha"), "alpha", items, options)
    real_write = lance.write_dataset
    monkeypatch.setattr(export_stage.lance, "write_dataset", dies)
    with pytest.raises(KeyboardInterrupt):
        run(rewrite_share=0.9)
    monkeypatch.setattr(export_stage.lance, "write_dataset", real_write)
    completed = run(rewrite_share=0.9)
    assert (completed.encoded, completed.superseded) == (1, 1), "the orphaned placement of n2 is superseded"

    for name, value in streaming_env(options).items():
        monkeypatch.setenv(name, value)
    clean_stale_shared_memory()
    seen = {}
    for ref in list_buckets(paths.mds_root, options):
        ds = PrxStreamingDataset(remote=f"{paths.mds_root}/{ref.rel}", local=str(tmp_path / "cache" / ref.rel), shuffle=False, batch_size=1)
        for sample in ds:
            assert sample["sample_id"] not in seen
            seen[sample["sample_id"]] = sample["caption"]
        del ds
        gc.collect()
    clean_stale_shared_memory()
    assert seen == {sample_id("alpha", it["key"]): it["caption"] for it in items}
