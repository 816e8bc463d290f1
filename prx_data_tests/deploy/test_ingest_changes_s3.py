"""Ingest change detection and the empty-source guard on an s3:// Lance root (moto server)."""

from __future__ import annotations

import json
from pathlib import Path

import lance
import pytest

from prx_data.ingest.driver import EmptySource, ingest_source
from prx_data.ingest.registry import RegisteredSource, SourceSpec
from prx_data_tests import images


def test_metadata_edits_and_vanished_folders_on_s3(tmp_path: Path, s3_server, s3_bucket):
    storage = s3_server.options()
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("a", "b"):
        (folder / f"{name}.jpg").write_bytes(images.jpeg(seed=ord(name)))
    (folder / "a.txt").write_text("before")
    uri = f"s3://{s3_bucket}/lance/photos.lance"

    def run(**extra):
        spec = SourceSpec(name="photos", shape="image_folder", location=str(folder), **extra)
        return ingest_source(RegisteredSource(spec, tmp_path / "photos.yaml"), uri, storage_options=storage)

    assert run().new == 2
    lance.dataset(uri, storage_options=storage).add_columns({"phash": "CAST(7 AS BIGINT)"})
    (folder / "a.txt").write_text("after")
    (folder / "b.json").write_text(json.dumps({"caption": "new sidecar"}))
    stats = run()
    assert (stats.metadata_updated, stats.updated, stats.new) == (2, 0, 0)
    rows = lance.dataset(uri, storage_options=storage).to_table(columns=["source_key", "source_caption", "phash"]).to_pylist()
    assert {r["source_key"]: (r["source_caption"], r["phash"]) for r in rows} == {"a.jpg": ("after", 7), "b.jpg": ("new sidecar", 7)}

    for path in folder.iterdir():
        path.unlink()
    with pytest.raises(EmptySource):
        run()
    assert lance.dataset(uri, storage_options=storage).count_rows() == 2
