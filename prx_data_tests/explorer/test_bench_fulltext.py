"""The full-text benchmark runs end to end on a small table (its figures are for the report)."""

from __future__ import annotations

import contextlib
import io


def test_bench_fulltext_small(tmp_path):
    from benchmarks.bench_fulltext import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert (
            main(
                [
                    "--rows",
                    "3000",
                    "--fragments",
                    "10",
                    "--queries",
                    "8",
                    "--lookups",
                    "8",
                    "--baseline-queries",
                    "2",
                    "--dir",
                    str(tmp_path),
                ]
            )
            == 0
        )
    text = out.getvalue()
    assert "10 fragments" in text and "compacted (remapped index)" in text
    assert "ratio fragmented/compacted" in text and "the 50 ms target" in text
