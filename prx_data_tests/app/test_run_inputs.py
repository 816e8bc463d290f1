"""What makes a source or the corpus run again (``prx_data.app.run_inputs``), on a local root and
on moto S3: any change of a file's size or mtime, a spec edit, a code version, an output-changing
setting or the tables themselves; nothing else."""

from __future__ import annotations

import os
import time
from pathlib import Path

import lance
import pyarrow as pa

from prx_data.app.run_inputs import (
    RunRecords,
    listing,
    settings_digest,
    source_inputs,
    table_versions,
)
from prx_data.core.settings import get_settings
from prx_data.ingest.registry import load_registry
from prx_data_tests.app.helpers import tiny_root

CODE = {"raw_samples": "ingest@3", "captions": "source@1"}


def _inputs(root: Path, code=CODE, settings=None, optout="v0"):
    source = load_registry(root / "sources").sources["photos"]
    return source_inputs(source, code_versions=code, settings=settings or get_settings(), optout_version=optout).fingerprint


def test_fingerprint_follows_every_input_and_nothing_else(tmp_path, monkeypatch):
    root = tiny_root(tmp_path / "data")
    monkeypatch.setenv("PRX_DATA_ROOT", str(root))
    get_settings.cache_clear()
    base = _inputs(root)
    assert base is not None and _inputs(root) == base  # stable
    monkeypatch.setenv("PRX_RAY_ADDRESS", "127.0.0.1:1")  # where Ray is changes no output
    get_settings.cache_clear()
    assert _inputs(root) == base

    image = root / "photos" / "p0.jpg"
    st = image.stat()
    os.utime(image, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000))  # mtime only, same bytes
    assert _inputs(root) != base
    base = _inputs(root)
    (root / "photos" / "p1.txt").write_text("an edited sidecar caption")  # size changes
    assert _inputs(root) != base
    base = _inputs(root)
    (root / "photos" / "new.jpg").write_bytes(image.read_bytes())
    assert _inputs(root) != base
    base = _inputs(root)
    spec = root / "sources" / "photos.yaml"
    spec.write_text(spec.read_text() + "description: edited\n")
    assert _inputs(root) != base
    base = _inputs(root)
    assert _inputs(root, code={**CODE, "captions": "source@2"}) != base
    assert _inputs(root, optout="v1") != base
    monkeypatch.setenv("PRX_DEDUP_RADIUS", "5")
    get_settings.cache_clear()
    assert _inputs(root) != base
    get_settings.cache_clear()


def test_settings_digest_ignores_credentials(monkeypatch, tmp_path):
    monkeypatch.setenv("PRX_DATA_ROOT", str(tmp_path))
    get_settings.cache_clear()
    a = settings_digest(get_settings())
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "rotated-secret")
    get_settings.cache_clear()
    assert settings_digest(get_settings()) == a
    get_settings.cache_clear()


def test_records_and_table_versions_on_local_and_s3(storage_root):
    options = storage_root.options
    lance_root = storage_root.uri("lance")
    table = storage_root.uri("lance", "sources", "photos.lance")
    records = RunRecords(lance_root, options)
    assert records.read("photos") is None
    assert table_versions([table], options) == {table: None}

    lance.write_dataset(pa.table({"a": [1, 2]}), table, storage_options=options)
    versions = table_versions([table], options)
    assert versions == {table: 1}
    records.write("photos", "fp-1", versions)
    assert records.unchanged("photos", "fp-1", table_versions([table], options))
    assert not records.unchanged("photos", "fp-2", versions)  # inputs changed
    assert not records.unchanged("photos", None, versions)  # inputs unknown: always run

    lance.write_dataset(pa.table({"a": [3]}), table, mode="append", storage_options=options)
    assert not records.unchanged("photos", "fp-1", table_versions([table], options))  # the table moved on


def test_listing_of_an_object_store_location_sees_rewrites(storage_root):
    from prx_data.core.storage import locate, write_bytes

    folder = storage_root.uri("photos")
    write_bytes(locate(storage_root.uri("photos", "a.jpg"), storage_root.options), b"x" * 10)
    write_bytes(locate(storage_root.uri("photos", "sub", "b.jpg"), storage_root.options), b"y" * 10)
    first = listing(folder, storage_root.options)
    assert [row[0] for row in first] == ["a.jpg", "sub/b.jpg"]
    assert listing(folder, storage_root.options) == first
    time.sleep(1.1)  # object stores keep mtimes to the second
    write_bytes(locate(storage_root.uri("photos", "a.jpg"), storage_root.options), b"x" * 10)  # same size, new mtime
    assert listing(folder, storage_root.options) != first
    assert listing(storage_root.uri("photos", "*.jpg"), storage_root.options)  # a glob lists its fixed prefix


def test_an_undecodable_file_name_is_listed_not_fatal(tmp_path, monkeypatch):
    root = tiny_root(tmp_path / "data")
    with open(os.path.join(os.fsencode(root / "photos"), b"\xff-odd.jpg"), "wb") as f:
        f.write(b"not really a jpeg")
    monkeypatch.setenv("PRX_DATA_ROOT", str(root))
    get_settings.cache_clear()
    assert _inputs(root) is not None
    get_settings.cache_clear()
