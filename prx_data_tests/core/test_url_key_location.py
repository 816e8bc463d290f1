"""Where the URL hash key of a table lives: always under the table's own root, never in the cwd."""

from __future__ import annotations

import os

import pytest

from prx_data.core.storage import locate
from prx_data.core.urls import key_uri_for_table, load_url_key


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("s3://bucket/lance/sources/web.lance", "s3://bucket/lance/_keys/url_hash.key"),
        ("s3://bucket/sources/web.lance", "s3://bucket/_keys/url_hash.key"),
        # Shallower than <root>/sources/<name>.lance: the bucket itself, not "s3:".
        ("s3://bucket/web.lance", "s3://bucket/_keys/url_hash.key"),
        ("s3://bucket/web.lance/", "s3://bucket/_keys/url_hash.key"),
        ("/data/lance/sources/web.lance", "/data/lance/_keys/url_hash.key"),
    ],
)
def test_key_stays_under_the_tables_root(table: str, key: str) -> None:
    assert key_uri_for_table(table) == key


@pytest.mark.parametrize("uri", ["s3:", "s3:/bucket/x.key", "gs:/bucket/_keys/url_hash.key"])
def test_a_uri_that_lost_a_slash_is_refused_not_written_locally(uri: str, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PRX_URL_HASH_KEY", raising=False)
    with pytest.raises(ValueError, match="lost a slash"):
        locate(uri)
    with pytest.raises(ValueError, match="lost a slash"):
        load_url_key(uri, create=True)
    assert os.listdir(tmp_path) == []


def test_local_paths_with_a_colon_still_work(tmp_path) -> None:
    folder = tmp_path / "run:1"
    folder.mkdir()
    assert locate(str(folder)).path == str(folder)
