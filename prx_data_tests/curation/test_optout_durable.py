"""Opt-outs, directed cases: the sequences issue 12 reported as leaks, bulk requests, degenerate
images, `optout apply` (no re-export) and the requester's receipt."""

from __future__ import annotations

import json
import os

import lance
import pyarrow as pa
import pytest
import yaml

from prx_data.app.cli import main
from prx_data.core.ids import sample_id
from prx_data_tests.curation.optout_world import Item, World, fingerprint, variant_bytes

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.fixture
def world(data_root) -> World:
    w = World(root=data_root, lance_root=str(data_root / "lance"), mds_root=str(data_root / "mds"))
    # The same photo (base 0) in both sources: byte-exact in s1, re-encoded in s2 (same hash).
    w.sources["s1"] = {"a": Item((0, "exact"), "https://a.example.org/a.jpg"), "b": Item((1, "exact"), "https://b.example.org/b.jpg")}
    w.sources["s2"] = {"x": Item((0, "exact"), "https://cdn.example.net/x.jpg"), "y": Item((2, "exact"), "https://cdn.example.net/y.jpg")}
    for name in w.sources:
        w.chain(name)
    w.merge()
    w.apply()
    return w


def _file(w: World, request: dict) -> None:
    (w.root / "optout" / f"{request['id']}.yaml").write_text(yaml.safe_dump(request))


def _mtimes(root) -> dict[str, float]:
    return {str(p): p.stat().st_mtime_ns for p in root.rglob("*.mds")}


def test_a_key_request_keeps_excluding_the_copy_after_reingest_drops_the_row(world):
    """Issue 12, cases 1 and 2: a key request, applied without re-export, then the row is opted
    out at re-ingest (its bytes dropped); its byte-identical copy in another source stays out,
    through re-ingest, re-export and every later skip-list build."""
    target, copy = sample_id("s1", "a"), sample_id("s2", "x")
    assert len({target, copy} & world.yielded()) == 1  # dedup keeps one of the two copies
    shards_before = _mtimes(world.root / "mds")
    _file(world, {"id": "req-key", "source_keys": ["s1:a"]})
    applied = world.apply()
    assert _mtimes(world.root / "mds") == shards_before, "optout apply must not re-export"
    assert applied.build_id and applied.optouts.audit.num_rows == 1
    assert not {target, copy} & world.yielded()

    world.ingest("s1")  # re-ingest: the row is now opted out at ingest
    row = lance.dataset(world.paths.raw_table("s1")).to_table(filter=f"sample_id = '{target}'").to_pylist()[0]
    assert row["status"] == "opted_out" and row["image"] is None
    phash, sha = fingerprint(0, "exact")
    assert (row["phash"], row["image_sha256"]) == (phash, sha), "an opted-out row keeps its fingerprint"
    world.apply()
    world.export("s1")
    world.export("s2")
    world.merge()
    world.rebuild_skip_lists()
    yielded = world.yielded()
    assert not {target, copy} & yielded
    assert {sample_id("s1", "b"), sample_id("s2", "y")} <= yielded

    (audit,) = lance.dataset(world.paths.optout_audit_table()).to_table().to_pylist()
    assert {(f["phash"], f["sha256"]) for f in audit["fingerprints"]} >= {(phash, sha)}


def test_fingerprints_are_durable_when_the_named_row_changes_and_reach_sources_that_land_later(world):
    _file(world, {"id": "req-url", "urls": ["https://a.example.org/a.jpg"]})
    world.apply()
    # The named row now holds another image: the copies of the image it held stay excluded.
    world.sources["s1"]["a"] = Item((3, "exact"), "https://a.example.org/a.jpg")
    world.chain("s1")
    # A source that lands later, with a re-encoded copy: excluded by the skip-list build alone.
    world.sources["s3"] = {"late": Item((0, "reencode"), "https://new.example.com/late.jpg")}
    world.chain("s3")
    world.merge()
    world.rebuild_skip_lists()
    yielded = world.yielded()
    assert fingerprint(0, "reencode")[0] == fingerprint(0, "exact")[0]
    assert not {sample_id("s1", "a"), sample_id("s2", "x"), sample_id("s3", "late")} & yielded
    assert sample_id("s2", "y") in yielded


def test_bulk_request_of_10000_urls_gives_one_summary_line_and_lists_the_unmatched(world, capsys):
    urls = [f"https://nowhere.example.com/{i}.jpg" for i in range(10_000)]
    urls[1234] = "https://b.example.org/b.jpg"
    keys = [f"s2:missing-{i}" for i in range(500)] + ["s2:y"]
    _file(world, {"id": "bulk", "urls": urls, "source_keys": keys})
    assert main(["optout", "apply", "--root", str(world.root)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    lines = [line for line in out if line.startswith("request ")]
    assert lines == [
        "request bulk: 10501 name(s), 2 sample(s) matched (2 by identity, 0 by fingerprint), 10499 unmatched, 2 fingerprint(s) kept, 2 shard(s)"
    ] or (len(lines) == 1 and "10499 unmatched" in lines[0] and "2 sample(s) matched" in lines[0]), out
    (audit,) = lance.dataset(world.paths.optout_audit_table()).to_table().to_pylist()
    assert len(audit["unmatched"]) == 10_499
    assert "url https://nowhere.example.com/0.jpg" in audit["unmatched"] and "source_key s2:missing-7" in audit["unmatched"]
    assert "url https://b.example.org/b.jpg" not in audit["unmatched"]
    assert audit["problems"] == ["10499 of 10501 names matched nothing (listed in 'unmatched')"]
    assert not {sample_id("s1", "b"), sample_id("s2", "y")} & world.yielded()


def test_domain_and_image_requests_and_the_receipt(world, capsys):
    image = world.root / "mine.jpg"
    image.write_bytes(variant_bytes(0, "half"))  # the requester's own smaller copy
    _file(world, {"id": "req-img", "requester_note": "by e-mail", "image_files": [str(image)], "max_hamming": 4})
    _file(world, {"id": "req-dom", "domains": ["example.net"]})
    assert main(["optout", "apply", "--root", str(world.root)]) == 0
    capsys.readouterr()
    yielded = world.yielded()
    assert sample_id("s2", "y") not in yielded and sample_id("s1", "b") in yielded

    assert main(["optout", "report", "--id", "req-img", "--json", "--root", str(world.root)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert {s["sample_id"] for s in r["samples"]} == {sample_id("s1", "a"), sample_id("s2", "x")}
    assert all(s["rule"] == "fingerprint" and s["matched_by"] == "image" and s["distance"] <= 4 for s in r["samples"])
    assert r["by_source"] == {"s1": 1, "s2": 1} and r["shards"]
    assert all(p["shard"] in r["shards"] for s in r["samples"] for p in s["shards"])
    assert r["builds"]["excluded_since"]["build_id"] and r["builds"]["latest"]["samples_excluded"] == 2

    assert main(["optout", "report", "--id", "req-dom", "--root", str(world.root)]) == 0
    md = capsys.readouterr().out
    assert (
        md.startswith("# Opt-out request `req-dom`")
        and "| identity | domain |" in md
        and "excluded from the loader since skip-list build" in md
    )
    assert main(["optout", "report", "--id", "never-filed", "--root", str(world.root)]) == 1
    assert "optout apply" in capsys.readouterr().err


def test_degenerate_images_match_by_content_key_only():
    """A flat image's phash is no fingerprint: its rows match by image_sha256, not by hash."""
    from prx_data.curation.optout.match import (
        fingerprints_of_samples,
        hashed_candidates,
        keyed_candidates,
        match_fingerprints,
        one_match_per_sample,
    )

    raw = pa.table(
        {
            "sample_id": ["flat1", "flat2", "flat1copy", "photo"],
            "source": ["s", "s", "t", "t"],
            "source_key": ["f1", "f2", "f1c", "p"],
            "source_url": [None, None, None, None],
            "status": ["ok"] * 4,
            "image_sha256": ["aa", "bb", "aa", "cc"],
            "phash": [0, 0, 0, 0],  # every flat image hashes alike; so, here, does the photo
            "degenerate": [True, True, True, False],
        }
    )
    exported = raw.select(["sample_id", "source", "phash"])  # the shards hold the same images
    named = pa.table(
        {
            "request_id": ["r"],
            "sample_id": ["flat1"],
            "source": ["s"],
            "matched_by": ["source_key"],
            "rule": ["identity"],
            "distance": pa.array([None], pa.int32()),
            "fingerprint_of": pa.array([None], pa.string()),
        }
    )
    fps = fingerprints_of_samples(named, raw, exported)
    assert fps["phash"].null_count == fps.num_rows and set(fps["sha256"].to_pylist()) == {"aa"}
    assert hashed_candidates(raw, exported)["sample_id"].to_pylist() == ["photo", "photo"]
    found = one_match_per_sample(match_fingerprints(fps, hashed_candidates(raw, exported), keyed_candidates(raw)))
    assert set(found["sample_id"].to_pylist()) == {"flat1", "flat1copy"}
    assert set(found["matched_by"].to_pylist()) == {"content_key"}


def test_optout_tables_tolerate_a_missing_degenerate_column(world):
    """Tables hashed before the phash stage recorded ``phash_degenerate`` still resolve."""
    names = lance.dataset(world.paths.raw_table("s1")).schema.names
    assert os.environ.get("PRX_DATA_ROOT")
    _file(world, {"id": "req-id", "sample_ids": [sample_id("s2", "y")]})
    report = world.apply().optouts
    assert report.audit.to_pylist()[0]["matched_samples"] == 1
    assert ("phash_degenerate" in names) or report.matched.num_rows == 1
