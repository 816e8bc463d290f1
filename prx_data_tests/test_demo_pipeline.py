"""The README's main command, run in-process on the demo corpus: every source ends with the
statuses the corpus was built to produce, through the real Dagster jobs."""

from __future__ import annotations

import lance

from prx_data.cli import main
from prx_data.demo.corpus import build_demo_corpus
from prx_data.paths import StoragePaths
from prx_data.settings import get_settings


def test_demo_runs_end_to_end(tmp_path, monkeypatch, capsys):
    root = tmp_path / "demo"
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    manifest = build_demo_corpus(root)
    assert main(["demo", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "Summary" in out and "dagster dev -w workspace.yaml" in out

    paths = StoragePaths.from_settings(get_settings())
    for source, expected_count in manifest.counts.items():
        table = lance.dataset(paths.raw_table(source)).to_table(columns=["source_key", "status"])
        got = dict(zip(table.column("source_key").to_pylist(), table.column("status").to_pylist()))
        expected = {key: status for (src, key), status in manifest.statuses.items() if src == source}
        assert got == expected, source
        # Records with a duplicated key collapse into one row.
        assert len(got) <= expected_count
