"""make_loader on an s3:// export at a non-default endpoint, with nothing in the environment.

streaming reads an S3 endpoint only from ``S3_ENDPOINT_URL``; before the loader bound its
streams to ``storage_options`` it listed the tree through the given endpoint and then asked
AWS's default endpoint for the shards. Here no AWS_* / S3_ENDPOINT_URL variable and no AWS
config file exist, so only the options passed to ``make_loader`` can reach the moto server.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from prx_data.compat.streaming_internals import ConfiguredS3Downloader
from prx_data.training.loader import make_loader
from prx_data_tests.export.trainable import PUBLISHED, build_corpus, loader_epoch, release


@pytest.fixture
def bare_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    import os

    for name in list(os.environ):
        if name.startswith(("AWS_", "S3_ENDPOINT", "PRX_")):
            monkeypatch.delenv(name)
    # No ambient credentials or endpoint from ~/.aws either.
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return monkeypatch


@pytest.mark.parametrize("num_workers", [0, 2])
def test_loader_reads_every_sample_through_its_storage_options_alone(tmp_path: Path, s3_server, s3_bucket, bare_env, num_workers):
    options = s3_server.options()
    root = f"s3://{s3_bucket}/mds"
    corpus = build_corpus(root, options)
    release()
    loader = make_loader(
        root, batch_size=1, shuffle=False, num_workers=num_workers, cache_dir=str(tmp_path / "cache"), storage_options=options
    )
    streams = loader.dataset.streams
    assert {s.remote.removeprefix(root + "/") for s in streams} == PUBLISHED
    assert all(isinstance(s._downloader, ConfiguredS3Downloader) for s in streams)
    ids = [s for batch in loader_epoch(loader) for s in batch]
    kept = set().union(*(corpus.kept_by_bucket()[rel] for rel in PUBLISHED))
    assert len(ids) == len(set(ids)) and set(ids) == kept
    # The shards came from moto into the cache, not from anywhere else.
    assert any(p.suffix == ".mds" for p in (tmp_path / "cache").rglob("*"))


def test_loader_never_falls_back_to_aws_when_the_endpoint_refuses(tmp_path: Path, s3_server, s3_bucket, bare_env):
    """Wrong keys at the given endpoint: an error from that endpoint, not an unsigned retry
    against AWS (streaming's own downloader retries unsigned on a 400 or missing credentials)."""
    options = s3_server.options()
    root = f"s3://{s3_bucket}/mds"
    build_corpus(root, options)
    release()
    bad = {**options, "aws_secret_access_key": "wrong"}
    downloader = ConfiguredS3Downloader(bad)
    with pytest.raises(Exception) as err:
        downloader.download(f"{root}/512/512x512/index.json", str(tmp_path / "index.json"), 10)
    assert "amazonaws.com" not in str(err.value)
    assert downloader._s3_client.meta.endpoint_url == options["aws_endpoint"]
