"""phashes through Dagster on LocalRay: every usable row hashed, reruns skip current rows,
a killed run resumes from its staged batches, duplicates in the demo corpus hash equal."""

from __future__ import annotations

from typing import Any

import dagster as dg
import lance
import pyarrow as pa
import pytest

from prx_data.core.paths import StoragePaths
from prx_data.core.settings import get_settings
from prx_data.demo.corpus import build_demo_corpus
from prx_data.imaging.phash import PHASH_VERSION
from prx_data.stages.column_stage import input_fingerprints, staging_uri
from prx_data.stages.phash_stage import PHASH_STAGE, hash_rows
from prx_data_tests.conftest import materializations, run_source

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

RAW, PHASH = dg.AssetKey("raw_samples"), dg.AssetKey("phashes")


def _meta(result, asset):
    (mat,) = materializations(result, asset)
    return {k: v.value for k, v in mat.metadata.items()}


def test_phashes_on_ray_resume_and_duplicates(data_root, prx_defs, instance):
    manifest = build_demo_corpus(data_root)
    paths = StoragePaths.from_settings(get_settings())
    results = {source: run_source(prx_defs, instance, source, selection=[RAW, PHASH]) for source in manifest.sources}
    assert all(r.success for r in results.values())

    meta = _meta(results["web"], "phashes")
    ds = lance.dataset(paths.raw_table("web"))
    ok = ds.to_table(columns=["phash", "phash_version", "phash_error"], filter="status = 'ok'")
    assert meta["rows_hashed"] == ok.num_rows > 0
    assert ok.column("phash").null_count == 0
    assert set(ok.column("phash_version").to_pylist()) == {PHASH_VERSION}
    # Each row names the Dagster run that wrote it (ingest) and that hashed it.
    runs = ds.to_table(columns=["ingest_run_id", "phash_run_id"], filter="status = 'ok'")
    assert set(runs.column("ingest_run_id").to_pylist()) == set(runs.column("phash_run_id").to_pylist()) == {results["web"].run_id}
    # Unusable rows are never touched.
    assert ds.to_table(columns=["phash_version"], filter="status != 'ok'").column("phash_version").null_count == ds.count_rows(
        filter="status != 'ok'"
    )

    hashes = {}
    for source in manifest.sources:
        t = lance.dataset(paths.raw_table(source)).to_table(columns=["source_key", "phash"], filter="status = 'ok'")
        hashes.update({(source, k): h for k, h in zip(t.column("source_key").to_pylist(), t.column("phash").to_pylist())})
    for group in manifest.exact_duplicates:
        assert len({hashes[ref] for ref in group}) == 1, group
    # Distinct pictures never collide.
    group_of = {ref: i for i, g in enumerate(manifest.near_duplicates) for ref in g}
    by_hash: dict[Any, Any] = {}
    for ref, h in hashes.items():
        by_hash.setdefault(h, set()).add(group_of.get(ref, ref))
    assert all(len(v) == 1 for v in by_hash.values()), [v for v in by_hash.values() if len(v) > 1]

    # A re-run finds everything current.
    again = run_source(prx_defs, instance, "web", selection=[PHASH])
    m = _meta(again, "phashes")
    assert m["rows_hashed"] == 0 and m["skipped_current"] == ok.num_rows


def test_killed_run_resumes_from_staging(data_root, prx_defs, instance):
    manifest = build_demo_corpus(data_root)
    assert run_source(prx_defs, instance, "photos", selection=[RAW]).success
    uri = StoragePaths.from_settings(get_settings()).raw_table("photos")
    ds = lance.dataset(uri)
    todo = ds.to_table(columns=["sample_id", "image_sha256"], filter="status = 'ok'", with_row_address=True)
    first = todo.slice(0, 5)
    images = [data for _, data in ds.read_blobs("image", addresses=first.column("_rowaddr").to_pylist(), preserve_order=True)]
    # What a run killed after its first batch leaves behind: a staged batch (with the fingerprint
    # of the inputs it was made from), nothing merged.
    staged = hash_rows(first.column("sample_id").to_pylist(), images, pa.table({}))
    staged = staged.append_column("phash_input_fp", pa.array(input_fingerprints(first, PHASH_STAGE.inputs), pa.string()))
    lance.write_dataset(staged, staging_uri(uri, "phash"))

    result = run_source(prx_defs, instance, "photos", selection=[PHASH])
    meta = _meta(result, "phashes")
    assert meta["resumed_from_staging"] == 5
    assert meta["rows_hashed"] == todo.num_rows - 5
    final = lance.dataset(uri).to_table(columns=["phash"], filter="status = 'ok'")
    assert final.column("phash").null_count == 0
    assert lance.dataset(uri).count_rows() == sum(1 for (s, _k) in manifest.statuses if s == "photos") - len(
        manifest.sources["photos"].duplicate_keys
    )
