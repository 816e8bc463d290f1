"""An opt-out request end to end through the real assets: resolved through lineage (including
perceptual copies in other sources), excluded by skip lists, never yielded by the loader,
audited, applied once when filed twice, and applied at ingest to a source that lands later."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import lance
import pytest
import yaml
from streaming.base.util import clean_stale_shared_memory

from prx_data.core.ids import sample_id
from prx_data.core.paths import StoragePaths
from prx_data.core.settings import get_settings
from prx_data.curation.lineage import find
from prx_data.demo.corpus import build_demo_corpus
from prx_data.export.tree import list_buckets
from prx_data.training.loader import PrxStreamingDataset
from prx_data_tests.conftest import materializations, run_source

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SOURCES = ("photos", "web", "archive")


def _corpus(defs, instance):
    result = defs.resolve_job_def("corpus").execute_in_process(instance=instance, raise_on_error=False)
    assert result.success
    return result


def _yielded(mds_root: str) -> set[str]:
    seen: set[str] = set()
    for ref in list_buckets(mds_root):
        if not Path(ref.dir(mds_root), "index.json").exists():
            continue  # not published for training (corpus_index: fully skipped or too small)
        clean_stale_shared_memory()
        try:
            ds = PrxStreamingDataset(local=ref.dir(mds_root), shuffle=False, batch_size=1)
        except ValueError as exc:  # every sample of the bucket is skipped
            assert "every sample" in str(exc)
            continue
        seen.update(s["sample_id"] for s in ds)
    return seen


def test_optout_request_end_to_end(data_root, prx_defs, instance):
    manifest = build_demo_corpus(data_root)
    for extra in set(manifest.sources) - set(SOURCES):
        (data_root / "sources" / f"{extra}.yaml").unlink()
    for source in SOURCES:
        assert run_source(prx_defs, instance, source).success, source
    settings = get_settings()
    paths = StoragePaths.from_settings(settings)
    _corpus(prx_defs, instance)
    before = _yielded(settings.mds_root)

    # The astronaut photo exists in photos, web and archive; the requester sends their copy.
    astronaut = data_root / "photos" / "landscape" / "astronaut.jpg"
    copies = {r.sample_id for r in find(paths, SOURCES, image=astronaut)}
    assert len(copies) == 3
    web_rows = (
        lance.dataset(paths.raw_table("web"))
        .to_table(columns=["sample_id", "source_url"], filter="status = 'ok' AND source_url IS NOT NULL")
        .to_pylist()
    )
    by_url = next(r for r in web_rows if r["sample_id"] not in copies)
    request = {
        "id": "req-42",
        "requester_note": "photographer asked by e-mail",
        "image_files": [str(astronaut)],
        "urls": [by_url["source_url"]],
        "source_keys": ["photos:does/not/exist.jpg"],
    }
    optout_dir = data_root / "optout"
    (optout_dir / "req-42.yaml").write_text(yaml.safe_dump(request))
    (optout_dir / "req-42-again.json").write_text(json.dumps(request))  # filed twice
    (optout_dir / "broken.yaml").write_text("id: [not, a, string]\nurls: 3\n")

    result = _corpus(prx_defs, instance)
    (mat,) = materializations(result, "optout_requests")
    assert mat.metadata["requests"].value == 1 and mat.metadata["bad_requests"].value == 1
    # The asset succeeds (whatever was applied before stays in force); its check fails, naming the file.
    (check,) = [e for e in result.get_asset_check_evaluations() if e.check_name == "every_request_loads"]
    assert not check.passed and "broken.yaml" in check.description
    matched = {r["sample_id"] for r in lance.dataset(paths.optout_samples_table()).to_table().to_pylist()}
    # The URL's image and every perceptual copy of it in any source are covered too.
    (url_record,) = find(paths, SOURCES, sample_id=by_url["sample_id"])
    hashes = {
        r["sample_id"]: r["phash"]
        for source in SOURCES
        for r in lance.dataset(paths.raw_table(source)).to_table(columns=["sample_id", "phash"]).to_pylist()
    }
    url_copies = {sid for sid, h in hashes.items() if h is not None and h == url_record.row["phash"]}
    assert by_url["sample_id"] in url_copies
    assert matched == copies | url_copies
    (audit,) = lance.dataset(paths.optout_audit_table()).to_table().to_pylist()
    assert audit["request_id"] == "req-42" and audit["matched_samples"] == len(matched)
    assert audit["shards_touched"] and audit["unmatched"] == ["source_key photos:does/not/exist.jpg"]
    assert audit["problems"] == ["1 of 3 names matched nothing (listed in 'unmatched')"]
    # The skip_lists asset recorded its build: the receipt names it.
    from prx_data.curation.optout.receipt import receipt

    assert receipt(paths, "req-42")["builds"]["latest"]["samples_excluded"] > 0

    after = _yielded(settings.mds_root)
    assert not (after & matched), "the loader yielded an opted-out sample"
    assert after == before - matched
    for sid in matched:
        (record,) = find(paths, SOURCES, sample_id=sid)
        assert "req-42" in record.optout_requests
        assert any(s["reason"] == "optout:req-42" for p in record.placements for s in p.skipped)

    # A source that lands later: the same URL is opted out at ingest.
    later = data_root / "later"
    later.mkdir()
    shutil.copy(astronaut, later / "a.jpg")
    (later / "items.jsonl").write_text(json.dumps({"k": "x1", "path": "a.jpg", "url": by_url["source_url"]}) + "\n")
    (data_root / "sources" / "later.yaml").write_text(
        f"name: later\nshape: jsonl\nlocation: {later / 'items.jsonl'}\nfields: {{key: k, image: path, image_kind: path, url: url}}\n"
    )
    # The same definitions: the registry is read at run time.
    assert run_source(prx_defs, instance, "later", selection=[dg.AssetKey("raw_samples")]).success
    (row,) = lance.dataset(paths.raw_table("later")).to_table(columns=["sample_id", "status", "error"]).to_pylist()
    assert row["sample_id"] == sample_id("later", "x1")
    assert row["status"] == "opted_out" and "req-42" in row["error"]
