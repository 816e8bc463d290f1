"""Keys in one Unicode form: an image folder holding ``café.jpg`` spelt precomposed (NFC) and with
a combining accent (NFD, as macOS names files) gives one row keyed in NFC, the second file
counted as a repeated key; ``prx-data optout add/apply --key`` in either spelling excludes it,
and ``prx-data lineage --key`` in either spelling finds it. Local and s3:// roots."""

from __future__ import annotations

import json
import os
import unicodedata

import lance
import pytest

from prx_data.app.cli import main
from prx_data.core.ids import sample_id
from prx_data.core.settings import get_settings
from prx_data_tests import images
from prx_data_tests.conftest import pin_fixture_publication
from prx_data_tests.curation.optout_world import World

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

NFC = unicodedata.normalize("NFC", "café.jpg")
NFD = unicodedata.normalize("NFD", "café.jpg")


@pytest.fixture
def world(storage_root, tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.startswith(("PRX_", "AWS_")) and name != "PRX_RAY_ADDRESS":
            monkeypatch.delenv(name)
    pin_fixture_publication(monkeypatch)
    w = World.on_root(storage_root, tmp_path / "data", monkeypatch)
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / NFC).write_bytes(images.jpeg(640, 480, seed=1))
    (folder / NFD).write_bytes(images.jpeg(640, 480, seed=2))
    (folder / "plain.jpg").write_bytes(images.jpeg(640, 480, seed=3))
    assert len(list(folder.iterdir())) == 3  # two names on this file system, one key
    (w.root / "sources" / "photos.yaml").write_text(f"name: photos\nshape: image_folder\nlocation: {folder}\n")
    w.sources["photos"] = {}
    env = {"PRX_LANCE_ROOT": w.lance_root, "PRX_MDS_ROOT": w.mds_root}
    if storage_root.server is not None:
        env = storage_root.server.env(**env)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    yield w
    get_settings.cache_clear()


def _build(w: World) -> None:
    w.ingest("photos")
    w.caption("photos")
    w.export("photos")
    w.merge()
    w.rebuild_skip_lists()


def _rows(w: World) -> list[dict]:
    ds = lance.dataset(w.paths.raw_table("photos"), storage_options=w.options)
    return ds.to_table(columns=["sample_id", "source_key", "status"]).to_pylist()


def test_two_spellings_of_one_name_are_one_key(world, tmp_path, capsys):
    _build(world)
    rows = _rows(world)
    assert sorted(r["source_key"] for r in rows) == sorted([NFC, "plain.jpg"])
    cafe = sample_id("photos", NFC)
    assert sample_id("photos", NFD) == cafe
    assert {r["sample_id"] for r in rows} == {cafe, sample_id("photos", "plain.jpg")}

    for spelling in (NFC, NFD):
        assert main(["lineage", "--key", f"photos:{spelling}", "--json", "--root", str(world.root)]) == 0
        (record,) = json.loads(capsys.readouterr().out)
        assert record["row"]["sample_id"] == cafe and record["row"]["source_key"] == NFC

    # A second run over the same folder keeps the one row (the repeated key is not a change).
    world.ingest("photos")
    assert sorted(r["source_key"] for r in _rows(world)) == sorted([NFC, "plain.jpg"])


@pytest.mark.parametrize("spelling", ["nfc", "nfd"])
def test_an_optout_by_key_in_either_spelling_excludes_the_row(world, tmp_path, capsys, spelling):
    _build(world)
    cafe = sample_id("photos", NFC)
    assert cafe in world.yielded(tmp_path / "cache0")
    key = NFC if spelling == "nfc" else NFD
    assert main(["optout", "add", "--root", str(world.root), "--id", "req-cafe", "--key", f"photos:{key}"]) == 0
    assert main(["optout", "apply", "--root", str(world.root)]) == 0
    out = capsys.readouterr().out
    assert "request req-cafe: 1 name(s), 1 sample(s) matched" in out, out
    after = world.yielded(tmp_path / "cache1")
    assert cafe not in after and sample_id("photos", "plain.jpg") in after
    # Re-ingest matches the request at ingest too: the row is opted out, its bytes dropped.
    world.ingest("photos")
    (row,) = [r for r in _rows(world) if r["sample_id"] == cafe]
    assert row["status"] == "opted_out"
