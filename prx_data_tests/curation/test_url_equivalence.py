"""URLs that RFC 3986 calls equivalent name one row: ``prx-data optout add --url`` / ``optout
apply`` and ``prx-data lineage --url`` given the stored URL with another scheme or host case, the
default port, a fragment, ``%7E`` / ``%7e`` for ``~`` or dot segments find it; ``https`` for an
``http`` URL and a path in another case do not (docs/optout.md). A row whose URL key was hashed
from the URL as written (before normalisation) still matches that spelling, and the next ingest
re-keys it. Local and s3:// roots."""

from __future__ import annotations

import json
import os
import re

import lance
import pyarrow as pa
import pytest

from prx_data.app.cli import main
from prx_data.core.ids import sample_id
from prx_data.core.settings import get_settings
from prx_data_tests.conftest import pin_fixture_publication
from prx_data_tests.curation.optout_world import Item, World

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

STORED = "http://127.0.0.1/a/~x.jpg"
EQUIVALENT = [
    "HTTP://127.0.0.1/a/~x.jpg",
    "http://127.0.0.1:80/a/~x.jpg",
    "http://127.0.0.1/a/~x.jpg#frag",
    "http://127.0.0.1/a/%7Ex.jpg",
    "http://127.0.0.1/a/%7ex.jpg",
    "http://127.0.0.1/a/b/../~x.jpg",
    "http://127.0.0.1/./a/~x.jpg",
]
DIFFERENT = ["https://127.0.0.1/a/~x.jpg", "http://127.0.0.1/A/~x.jpg", "http://127.0.0.1:8080/a/~x.jpg"]
TARGET = sample_id("s1", "x")


@pytest.fixture
def world(storage_root, tmp_path, monkeypatch):
    for name in list(os.environ):
        if name.startswith(("PRX_", "AWS_")) and name != "PRX_RAY_ADDRESS":
            monkeypatch.delenv(name)
    pin_fixture_publication(monkeypatch)
    w = World.on_root(storage_root, tmp_path / "data", monkeypatch)
    w.sources["s1"] = {"x": Item((0, "exact"), STORED), "y": Item((1, "exact"), "http://127.0.0.1/a/y.jpg")}
    env = {"PRX_LANCE_ROOT": w.lance_root, "PRX_MDS_ROOT": w.mds_root}
    if storage_root.server is not None:
        env = storage_root.server.env(**env)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    get_settings.cache_clear()
    w.chain("s1")
    w.merge()
    w.rebuild_skip_lists()
    yield w
    get_settings.cache_clear()


def _lineage(w: World, url: str, capsys) -> set[str]:
    code = main(["lineage", "--url", url, "--json", "--root", str(w.root)])
    out = capsys.readouterr().out
    return {r["row"]["sample_id"] for r in json.loads(out)} if code == 0 else set()


def _apply(w: World, capsys) -> dict[str, int]:
    assert main(["optout", "apply", "--root", str(w.root)]) == 0
    out = capsys.readouterr().out
    return {m[0]: int(m[1]) for m in re.findall(r"request (\S+): \d+ name\(s\), (\d+) sample\(s\) matched", out)}


def test_equivalent_urls_find_the_row_in_lineage_and_opt_outs(world, tmp_path, capsys):
    for url in [STORED, *EQUIVALENT]:
        assert _lineage(world, url, capsys) == {TARGET}, url
    for url in DIFFERENT:
        assert _lineage(world, url, capsys) == set(), url

    for i, url in enumerate([*EQUIVALENT, *DIFFERENT]):
        assert main(["optout", "add", "--root", str(world.root), "--id", f"req-{i}", "--url", url]) == 0
    matched = _apply(world, capsys)
    assert matched == {f"req-{i}": 1 if i < len(EQUIVALENT) else 0 for i in range(len(EQUIVALENT) + len(DIFFERENT))}
    after = world.yielded(tmp_path / "cache")
    assert TARGET not in after and sample_id("s1", "y") in after
    # At ingest the matcher compares normalised URLs too: the row is opted out, its bytes dropped.
    world.ingest("s1")
    row = _row(world)
    assert row["status"] == "opted_out" and row["image"] is None


def _row(w: World) -> dict:
    ds = lance.dataset(w.paths.raw_table("s1"), storage_options=w.options)
    return ds.to_table(columns=["sample_id", "status", "image", "source_url_key"], filter=f"sample_id = '{TARGET}'").to_pylist()[0]


def test_a_row_keyed_from_the_url_as_written_still_matches_and_is_re_keyed(world, capsys):
    import hashlib
    import hmac

    from prx_data.core.lance_io import update_columns
    from prx_data.core.urls import key_uri, load_url_key, url_key

    written = "http://127.0.0.1:80/a/%7ex.jpg"  # the spelling the source lists
    world.sources["s1"]["x"] = Item((0, "exact"), written)
    world.chain("s1")
    key = load_url_key(key_uri(world.lance_root), world.options)
    assert key is not None and _row(world)["source_url_key"] == url_key(STORED, key)
    # A table hashed before normalisation holds the hash of the URL as written.
    legacy = hmac.new(key, written.encode(), hashlib.sha256).hexdigest()

    def hashed_as_written() -> None:
        ds = lance.dataset(world.paths.raw_table("s1"), storage_options=world.options)
        update_columns(ds, pa.table({"sample_id": [TARGET], "source_url_key": [legacy]}))

    hashed_as_written()
    assert _lineage(world, written, capsys) == {TARGET}  # the spelling it was hashed from still matches
    world.ingest("s1")  # the next run re-keys the row (its bytes and metadata are unchanged)
    assert _row(world)["source_url_key"] == url_key(STORED, key) and _row(world)["status"] == "ok"
    assert _lineage(world, "HTTP://127.0.0.1/a/~x.jpg#top", capsys) == {TARGET}

    # An opt-out applied before the re-key matches the row by the URL as written: none is lost.
    hashed_as_written()
    assert main(["optout", "add", "--root", str(world.root), "--id", "req-written", "--url", written]) == 0
    assert _apply(world, capsys) == {"req-written": 1}
