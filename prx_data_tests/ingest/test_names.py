"""Names that cannot be keys are refused at the door, and never take a source down.

- a source name or an opt-out request id ending in a newline (what YAML's ``name: |`` gives) is
  refused: validation is a full match, not ``re.match`` with ``$``;
- a second spec claiming an existing source's name is the one rejected, however its file name
  sorts, and the error names both files;
- a file whose name is not UTF-8 becomes one ``invalid_record`` row under a stable
  percent-escaped key; the rest of its source is ingested (local and s3:// table roots).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import lance
import pytest
from pydantic import ValidationError

from prx_data.core.ids import sample_id
from prx_data.curation.optout.requests import OptOutRequest
from prx_data.ingest.driver import ingest_source
from prx_data.ingest.registry import load_registry
from prx_data_tests.images import photo_like


def _spec(folder: Path, file: str, text: str) -> Path:
    path = folder / file
    path.write_text(text)
    return path


def test_a_name_ending_in_a_newline_is_refused(tmp_path):
    _spec(tmp_path, "web.yaml", "name: |\n  web\nshape: image_folder\nlocation: imgs\n")
    reg = load_registry(tmp_path)
    assert reg.sources == {}
    assert "field 'name'" in reg.errors[0].message


@pytest.mark.parametrize("bad", ["req-1\n", "req-1\n\n", "\nreq-1"])
def test_a_request_id_ending_in_a_newline_is_refused(bad):
    with pytest.raises(ValidationError, match="id"):
        OptOutRequest(id=bad, sample_ids=["0" * 32])
    with pytest.raises(ValidationError, match="sample_ids"):
        OptOutRequest(id="req-1", sample_ids=["0" * 32 + "\n"])
    assert OptOutRequest(id="req-1").id == "req-1"


@pytest.mark.parametrize("newcomer", ["0-web.yaml", "a.yaml", "web-copy.yaml", "zz.yaml"])
def test_a_second_spec_with_a_taken_name_is_rejected_whatever_its_file_name(tmp_path, newcomer):
    _spec(tmp_path, "web.yaml", "name: web\nshape: image_folder\nlocation: photos\n")
    _spec(tmp_path, newcomer, "name: web\nshape: image_folder\nlocation: elsewhere\n")
    reg = load_registry(tmp_path)
    assert reg.get("web").path.name == "web.yaml"
    assert reg.get("web").spec.location == "photos"
    (error,) = reg.errors
    assert error.path.name == newcomer and "web.yaml" in error.message and "ignored" in error.message


def _jpeg(path: Path, seed: int) -> None:
    photo_like(64, 48, seed=seed).save(path, "JPEG", quality=90)


def test_an_undecodable_file_name_is_one_error_row(storage_root, tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    _jpeg(photos / "ok.jpg", 1)
    raw = os.fsencode(photos) + b"/caf\xe9.jpg"  # Latin-1 'é': not UTF-8
    shutil.copyfile(photos / "ok.jpg", raw)
    _jpeg(photos / "zz.jpg", 2)
    specs = tmp_path / "sources"
    specs.mkdir()
    _spec(specs, "photos.yaml", "name: photos\nshape: image_folder\nlocation: ../photos\n")
    uri = storage_root.uri("lance", "photos.lance")
    ingest_source(load_registry(specs).get("photos"), uri, storage_options=storage_root.options)
    rows = {
        r["source_key"]: r
        for r in lance.dataset(uri, storage_options=storage_root.options)
        .to_table(columns=["sample_id", "source_key", "status", "error"])
        .to_pylist()
    }
    assert set(rows) == {"ok.jpg", "zz.jpg", "caf%E9.jpg"}
    assert rows["ok.jpg"]["status"] == rows["zz.jpg"]["status"] == "ok"
    bad = rows["caf%E9.jpg"]
    assert bad["status"] == "invalid_record" and "not valid UTF-8" in bad["error"]
    assert bad["sample_id"] == sample_id("photos", "caf%E9.jpg")  # stable across runs
    ingest_source(load_registry(specs).get("photos"), uri, storage_options=storage_root.options)
    assert lance.dataset(uri, storage_options=storage_root.options).count_rows() == 3


def test_escaping_helpers():
    from prx_data.core.ids import escape_undecodable, printable

    assert escape_undecodable("caf\udce9.jpg") == "caf%E9.jpg"
    assert escape_undecodable("plain ünïcode") == "plain ünïcode"
    assert printable("a.jpg\nINFO - forged line\x1b[31m") == "a.jpg\\nINFO - forged line\\x1b[31m"
    assert "\n" not in printable("x\u2028y\r\n") and "\udce9" not in printable("caf\udce9")
