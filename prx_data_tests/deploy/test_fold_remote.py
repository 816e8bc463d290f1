"""The fold policy on an s3:// root (moto): the sparse bucket's images land in the target
bucket's stream with the target shape, the originals are skipped, the data card counts them,
a re-run writes no object, and turning the policy off removes the copies."""

from __future__ import annotations

from pathlib import Path

from prx_data.core.paths import StoragePaths
from prx_data.core.storage import streaming_env
from prx_data.curation.report import build_data_card
from prx_data.export.corpus_index import unpublished_buckets
from prx_data_tests.curation.test_fold import OFF, ON, SPARSE, TARGET, corpus_items, epoch, ids, pipeline
from prx_data_tests.export.rawtables import write_raw


def _objects(client, bucket: str) -> dict[str, str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="mds/")
    return {o["Key"]: o["ETag"] for page in pages for o in page.get("Contents", ()) if not o["Key"].endswith("/")}


def test_fold_on_s3(tmp_path: Path, s3_server, s3_bucket, clean_prx_env):
    monkeypatch = clean_prx_env
    options = s3_server.options()
    for name, value in streaming_env(options).items():
        monkeypatch.setenv(name, value)
    paths = StoragePaths(f"s3://{s3_bucket}/lance", f"s3://{s3_bucket}/mds")
    client = s3_server.client()
    write_raw(paths.raw_table("alpha"), "alpha", corpus_items(), options)

    report, _ = pipeline(paths, ON, options, str(tmp_path))
    assert (report.folds, report.folded, report.encoded) == ({SPARSE: TARGET}, 2, 2)
    assert any(k.startswith(f"mds/{TARGET}/alpha--fold/") and k.endswith(".mds") for k in _objects(client, s3_bucket))
    assert unpublished_buckets(paths.mds_root, options)[SPARSE]["unskipped"] == 0
    seen = epoch(paths.mds_root, options, str(tmp_path / "cache1"))
    assert {sid for sid, size in seen.items() if size == (576, 464)} >= ids("sparse0", "sparse1")
    card = build_data_card(paths, ["alpha"], options=options).markdown
    assert "| folded | 2 |" in card and f"| {SPARSE} | {TARGET} | 2 |" in card and "**14 trainable**" in card

    published = _objects(client, s3_bucket)
    again, _ = pipeline(paths, ON, options, str(tmp_path))
    assert (again.encoded, again.reused, again.kept) == (0, 0, 2)
    assert _objects(client, s3_bucket) == published, "a re-run writes no object"

    off, skips = pipeline(paths, OFF, options, str(tmp_path))
    assert off.folded == 0 and "folded" not in set(skips["reason"].to_pylist())
    assert not any(k.startswith(f"mds/{TARGET}/alpha--fold/index.json") for k in _objects(client, s3_bucket))
    seen = epoch(paths.mds_root, options, str(tmp_path / "cache2"))
    assert not ids("sparse0", "sparse1") & set(seen), "back in their sparse, unpublished bucket"
