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
    listed_rows,
    listing,
    settings_digest,
    source_inputs,
    table_versions,
)
from prx_data.app.run_plan import plan_run
from prx_data.core.settings import Settings, get_settings
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


def test_listed_rows_counts_image_files_and_guesses_rows_of_container_files():
    entries = [
        ("a/p0.jpg", 50_000, 1),
        ("a/p0.txt", 30, 1),  # a sidecar adds nothing
        ("b/P1.JPEG", 9, 1),  # an image file is a row whatever its size
        ("rows.parquet", 10 * 64 * 1024 + 5, 1),  # a container: a row per 64 KiB
        ("notes.bin", 100, 1),
    ]
    assert listed_rows(entries) == 2 + 10
    assert listed_rows([]) == 0


def test_ray_starts_with_the_command_only_for_a_source_grown_past_the_local_limit(storage_root, tmp_path):
    """RunPlan.expects_ray: the listing's rows against the last successful run's, with the
    source's files and the run records on the storage under test."""
    from prx_data.core.storage import locate, write_bytes

    jpeg = (tiny_root(tmp_path / "made", images=1) / "photos" / "p0.jpg").read_bytes()
    sources = tmp_path / "sources"
    sources.mkdir()
    (sources / "photos.yaml").write_text(f"name: photos\nshape: image_folder\nlocation: {storage_root.uri('photos')}\nlicense: CC0-1.0\n")

    def add_images(first: int, count: int) -> None:
        for i in range(first, first + count):
            write_bytes(locate(storage_root.uri("photos", f"p{i}.jpg"), storage_root.options), jpeg)
            write_bytes(locate(storage_root.uri("photos", f"p{i}.txt"), storage_root.options), b"a caption")

    settings = Settings(
        data_root=storage_root.base,
        sources_dir=str(sources),
        optout_dir=str(tmp_path / "optout"),
        lance_root=storage_root.uri("lance"),
        mds_root=storage_root.uri("mds"),
        storage_options=storage_root.options or {},
    )

    def plan(force: bool = False):
        return plan_run(settings, load_registry(settings.sources_dir), ["photos"], force=force)

    add_images(0, 3)
    first = plan()
    assert first.to_run == ["photos"] and first.inputs["photos"].listed_rows == 3
    assert first.expects_ray(2) and not first.expects_ray(3)  # never run: its whole listing is new

    first.records.write("photos", first.inputs["photos"].fingerprint, {}, first.inputs["photos"].listed_rows)
    assert RunRecords(settings.lance_root, settings.storage_options).listed_rows("photos") == 3
    again = plan(force=True)  # runs, but nothing was added since
    assert again.to_run == ["photos"] and not again.expects_ray(0)

    add_images(3, 3)
    grown = plan()
    assert grown.to_run == ["photos"] and grown.inputs["photos"].listed_rows == 6
    assert grown.expects_ray(2) and not grown.expects_ray(3)  # 3 new rows
