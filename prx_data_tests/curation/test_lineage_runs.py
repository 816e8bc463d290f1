"""Lineage names the run that wrote each value of a row, and the CLI answers without importing
Dagster unless run details are asked for."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from prx_data.core.ids import sample_id
from prx_data.curation.lineage import find, format_record
from prx_data_tests.curation.optout_world import Item, World

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
REPO = Path(__file__).resolve().parents[2]


def test_each_row_records_the_run_that_wrote_it(data_root):
    w = World(root=data_root, lance_root=str(data_root / "lance"), mds_root=str(data_root / "mds"))
    w.sources["s1"] = {"a": Item((0, "exact"), "https://a.example.org/a.jpg")}
    w.write_source("s1")
    w.ingest("s1", run_id="run-hash-1")
    w.caption("s1", run_id="run-cap-1")
    w.sources["s1"]["b"] = Item((1, "exact"), "https://a.example.org/b.jpg")  # a row added later
    w.write_source("s1")
    w.ingest("s1", run_id="run-hash-2")
    w.caption("s1", run_id="run-cap-2")
    w.captioner += 1  # a new captioner redoes every caption: a third run writes them all
    w.caption("s1", run_id="run-cap-3")
    w.export("s1", run_id="run-exp-1")
    w.sources["s1"]["c"] = Item((2, "exact"), "https://a.example.org/c.jpg")
    w.write_source("s1")
    w.ingest("s1", run_id="run-hash-3")
    w.caption("s1", run_id="run-cap-4")
    w.export("s1", run_id="run-exp-2")  # incremental: a and b stay where run-exp-1 put them

    (a,) = find(w.paths, ["s1"], sample_id=sample_id("s1", "a"))
    (b,) = find(w.paths, ["s1"], sample_id=sample_id("s1", "b"))
    assert (a.row["phash_run_id"], b.row["phash_run_id"]) == ("run-hash-1", "run-hash-2")
    assert a.row["caption_run_id"] == b.row["caption_run_id"] == "run-cap-3"
    assert "run=run-hash-1" in format_record(a) and "run=run-cap-3" in format_record(a)
    (c,) = find(w.paths, ["s1"], sample_id=sample_id("s1", "c"))
    # Ingest: the run that last wrote each row; export: the run that placed each sample.
    assert (a.row["ingest_run_id"], b.row["ingest_run_id"], c.row["ingest_run_id"]) == ("run-hash-1", "run-hash-2", "run-hash-3")
    assert [p.export_run_id for p in a.placements] == ["run-exp-1"] and [p.export_run_id for p in c.placements] == ["run-exp-2"]
    assert "ingest run=run-hash-1" in format_record(a) and "run=run-exp-1" in format_record(a)

    env = {**os.environ, "PYTHONPATH": str(REPO), "PRX_DATA_ROOT": str(data_root)}
    code = (
        "import sys; from prx_data.app.cli import main; rc = main(['lineage', '--key', 's1:b', '--json']); "
        "assert 'dagster' not in sys.modules, 'lineage imported Dagster'; sys.exit(rc)"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    (record,) = json.loads(out.stdout)
    assert record["row"]["phash_run_id"] == "run-hash-2" and record["placements"][0]["shard"]
