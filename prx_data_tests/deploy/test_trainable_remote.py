"""The trainable-export promise on an s3:// root (moto server): corpus_index publishes only the
buckets a trainer can batch from, and both the project's loader and a PRX-style reader iterate a
full epoch over the remote tree at batch sizes 1, 4 and min_stream_samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from prx_data.core.storage import streaming_env
from prx_data.export.corpus_index import unpublished_buckets
from prx_data.training.loader import make_loader, published_buckets
from prx_data_tests.export.trainable import (
    BATCH_SIZES,
    PUBLISHED,
    build_corpus,
    loader_epoch,
    prx_style_epoch,
    prx_style_folders,
    release,
)


def _check(corpus, batches: list[list[str]], batch_size: int, honours_skips: bool) -> None:
    bucket = corpus.bucket_of()
    members = corpus.kept_by_bucket() if honours_skips else corpus.all_by_bucket()
    ids = [s for b in batches for s in b]
    assert len(ids) == len(set(ids))
    assert {bucket[s] for s in ids} == PUBLISHED
    if honours_skips:
        assert not set(ids) & corpus.skipped
    assert all(len(b) == batch_size and len({bucket[s] for s in b}) == 1 for b in batches)
    for rel in PUBLISHED:
        assert sum(1 for s in ids if bucket[s] == rel) == len(members[rel]) // batch_size * batch_size


def test_remote_tree_publishes_trainable_buckets_and_both_readers_finish_an_epoch(tmp_path: Path, s3_server, s3_bucket, clean_prx_env):
    monkeypatch = clean_prx_env
    options = s3_server.options()
    root = f"s3://{s3_bucket}/mds"
    corpus = build_corpus(root, options)
    assert {b.rel for b in published_buckets(root, options)} == PUBLISHED
    notes = unpublished_buckets(root, options)
    assert set(notes) == {"512/576x464", "1024/1024x1024", "4096/4096x4096"}
    assert notes["1024/1024x1024"]["reason"] == "fully skipped"
    seen = {f.removeprefix(root + "/") for tier in ("512", "1024", "2048", "4096") for f in prx_style_folders(f"{root}/{tier}", options)}
    assert seen == PUBLISHED

    for name, value in streaming_env(options).items():
        monkeypatch.setenv(name, value)
    release()
    for batch_size in BATCH_SIZES:
        loader = make_loader(root, batch_size=batch_size, cache_dir=str(tmp_path / f"cache-{batch_size}"), storage_options=options)
        _check(corpus, loader_epoch(loader), batch_size, honours_skips=True)
        batches = prx_style_epoch([f"{root}/512", f"{root}/2048"], batch_size, str(tmp_path / f"prx-{batch_size}"), options)
        _check(corpus, batches, batch_size, honours_skips=False)
    with pytest.warns(UserWarning, match="left out 3"), pytest.raises(ValueError, match="nothing to train on"):
        make_loader(root, batch_size=64, cache_dir=str(tmp_path / "cache-64"), storage_options=options)
