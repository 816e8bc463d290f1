"""Lineage from the CLI, table maintenance (compaction + indexes) and the data card, on a corpus
processed by the real stage functions."""

from __future__ import annotations

import json

import dagster as dg
import lance
import pyarrow as pa
import pytest

from prx_data.app.cli import main
from prx_data.curation.maintenance import maintain_table
from prx_data_tests.conftest import materializations, process_corpus_locally

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_lineage_cli_by_key_url_image_and_bad_queries(data_root, capsys):
    corpus = process_corpus_locally(data_root, ("photos", "web", "archive"))
    paths = corpus["paths"]
    web = (
        lance.dataset(paths.raw_table("web"))
        .to_table(columns=["sample_id", "source_key", "source_url"], filter="status = 'ok'")
        .to_pylist()[0]
    )

    assert main(["lineage", "--key", f"web:{web['source_key']}", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    assert record["row"]["sample_id"] == web["sample_id"] and record["matched_by"] == "source_key"
    placement = record["placements"][0]
    assert placement["shard"] or placement["drop_reason"]
    assert record["row"]["caption_model"] == "source" and record["row"]["phash_version"]

    assert record["row"]["label"] and 0.5 <= record["row"]["label_score"] <= 1.0

    assert main(["lineage", "--url", web["source_url"]]) == 0
    text = capsys.readouterr().out
    assert web["sample_id"] in text and " score=" in text  # the label's score is shown

    astronaut = data_root / "photos" / "landscape" / "astronaut.jpg"
    assert main(["lineage", "--image", str(astronaut), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert {r["row"]["source"] for r in records} == {"photos", "web", "archive"}
    # The copies that lost dedup say which copy was kept.
    kept = [s["kept_sample_id"] for r in records for p in r["placements"] for s in p["skipped"] if s["reason"] == "dedup"]
    assert kept and len(set(kept)) == 1

    assert main(["lineage", "--id", "not-an-id"]) == 2
    assert "not a sample id" in capsys.readouterr().err
    assert main(["lineage", "--id", "0" * 32]) == 1
    (data_root / "notes.jpg").write_text("not an image")
    assert main(["lineage", "--image", str(data_root / "notes.jpg")]) == 2
    assert "cannot be decoded" in capsys.readouterr().err


def test_maintenance_compacts_and_indexes(tmp_path):
    uri = str(tmp_path / "t.lance")
    for i in range(12):  # twelve small appends: twelve fragments
        rows = pa.table(
            {
                "sample_id": [f"{i:02d}{j:030d}" for j in range(50)],
                "caption": [f"a red bicycle number {i} {j}" if j % 2 else "a blue boat" for j in range(50)],
                "source_caption": ["x"] * 50,
                "status": ["ok"] * 50,
                "label": ["visual"] * 50,
            }
        )
        lance.write_dataset(rows, uri, mode="append" if i else "create")
    report = maintain_table(uri, target_rows_per_fragment=1000)
    assert (report.fragments_before, report.fragments_after) == (12, 1) and report.compacted
    assert report.indexes["caption:INVERTED"] == "created" and report.indexes["sample_id:BTREE"] == "created"
    ds = lance.dataset(uri)
    hits = ds.to_table(columns=["caption"], full_text_query="bicycle")
    assert hits.num_rows == 300
    again = maintain_table(uri, target_rows_per_fragment=1000)
    assert not again.compacted and again.indexes["caption:INVERTED"] == "updated"


def test_maintenance_and_report_assets(data_root, prx_defs, instance):
    corpus = process_corpus_locally(data_root, ("photos", "web"))
    result = prx_defs.resolve_job_def("corpus").execute_in_process(
        instance=instance, asset_selection=[dg.AssetKey("table_maintenance"), dg.AssetKey("corpus_report")]
    )
    assert result.success
    (maint,) = materializations(result, "table_maintenance")
    assert maint.metadata["tables"].value == 4
    (report,) = materializations(result, "corpus_report")
    card = report.metadata["data_card"].value
    assert "# Data card" in card and "## Skip lists, by reason" in card and "dedup" in card
    assert report.metadata["exported"].value > report.metadata["trainable"].value > 0
    # The file links its charts beside it; the UI's copy holds them inline (it cannot fetch files).
    written = (data_root / "mds" / "_reports" / "data_card.md").read_text()
    assert written.count("](charts/") == card.count("](data:image/png;base64,") == 6
    assert written.split("## Sources")[1] == card.split("## Sources")[1]
    path, page = report.metadata["path"], report.metadata["data_card_page"]
    assert isinstance(path, dg.UrlMetadataValue) and path.value == (data_root / "mds" / "_reports" / "data_card.md").resolve().as_uri()
    assert isinstance(page, dg.UrlMetadataValue) and page.value == "http://127.0.0.1:8765/card"
    del corpus
