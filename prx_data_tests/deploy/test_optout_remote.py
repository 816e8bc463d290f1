"""Opt-outs on s3:// Lance and MDS roots (moto): a key request applied with `prx-data optout
apply` (no re-export), the row then opted out at re-ingest, and its byte-identical copy in
another source still never streamed by the remote loader; the receipt reads the remote tables."""

from __future__ import annotations

import json
from pathlib import Path

import lance
import pytest
import yaml

from prx_data.app.cli import main
from prx_data.core.ids import sample_id
from prx_data.core.storage import streaming_env
from prx_data_tests.curation.optout_world import Item, World, fingerprint

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_optout_on_object_store_roots(tmp_path: Path, s3_server, s3_bucket, clean_prx_env, capsys):
    monkeypatch = clean_prx_env
    options = s3_server.options()
    root = tmp_path / "data"
    world = World(root=root, lance_root=f"s3://{s3_bucket}/lance", mds_root=f"s3://{s3_bucket}/mds", options=options)
    world.sources["s1"] = {"a": Item((0, "exact"), "https://a.example.org/a.jpg"), "b": Item((1, "exact"), "https://a.example.org/b.jpg")}
    world.sources["s2"] = {
        "x": Item((0, "exact"), "https://cdn.example.net/x.jpg"),
        "y": Item((2, "half"), "https://cdn.example.net/y.jpg"),
    }
    for name in world.sources:
        world.chain(name)
    world.merge()
    world.rebuild_skip_lists()
    for name, value in {**s3_server.env(), **streaming_env(options)}.items():
        monkeypatch.setenv(name, value)
    target, copy = sample_id("s1", "a"), sample_id("s2", "x")
    before = world.yielded(tmp_path / "cache0")
    assert len({target, copy} & before) == 1  # dedup keeps one

    (root / "optout" / "req-s3.yaml").write_text(yaml.safe_dump({"id": "req-s3", "source_keys": ["s1:a"]}))
    monkeypatch.setenv("PRX_LANCE_ROOT", world.lance_root)
    monkeypatch.setenv("PRX_MDS_ROOT", world.mds_root)
    assert main(["optout", "apply", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "request req-s3: 1 name(s), 2 sample(s) matched (1 by identity, 1 by fingerprint)" in out
    assert not {target, copy} & world.yielded(tmp_path / "cache1")

    world.ingest("s1")  # the row is opted out at ingest: bytes dropped, fingerprint kept
    row = lance.dataset(world.paths.raw_table("s1"), storage_options=options).to_table(filter=f"sample_id = '{target}'").to_pylist()[0]
    assert row["status"] == "opted_out" and row["image"] is None and row["phash"] == fingerprint(0, "exact")[0]
    world.apply()
    world.export("s1")
    world.merge()
    world.rebuild_skip_lists()
    after = world.yielded(tmp_path / "cache2")
    assert not {target, copy} & after
    assert {sample_id("s1", "b"), sample_id("s2", "y")} <= after

    assert main(["optout", "report", "--id", "req-s3", "--json", "--root", str(root)]) == 0
    receipt = json.loads(capsys.readouterr().out)
    assert {s["sample_id"]: s["rule"] for s in receipt["samples"]} == {target: "identity", copy: "fingerprint"}
    assert receipt["builds"]["latest"]["samples_excluded"] >= 1

    # Lineage and the data card read the skips of the s3:// tree (they once reported none there).
    assert main(["lineage", "--key", "s2:x", "--json", "--root", str(root)]) == 0
    records = json.loads(capsys.readouterr().out)
    reasons = {s["reason"] for r in records for p in r["placements"] for s in p["skipped"]}
    assert "optout:req-s3" in reasons
    from prx_data.curation.report import build_data_card

    card = build_data_card(world.paths, sorted(world.sources), options=options)
    assert card.totals["skipped"] == 1 and card.totals["trainable"] == card.totals["exported"] - 1, card.totals  # the copy, by optout
