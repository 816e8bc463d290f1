"""Every document the code cites is in the repository (docs/), so a comment's reference can be
followed; the old out-of-tree design document is cited nowhere."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CITED = re.compile(r"\bdocs/([\w./-]+?\.md)")


def _sources():
    for folder in ("prx_data", "prx_data_tests", "benchmarks", "scripts"):
        for path in (REPO / folder).rglob("*"):
            if path.suffix in (".py", ".sh", ".html", ".yaml") and path.is_file():
                yield path


def test_cited_docs_exist():
    missing = []
    for path in _sources():
        text = path.read_text(errors="replace")
        for name in CITED.findall(text):
            if not (REPO / "docs" / name).is_file():
                missing.append(f"{path.relative_to(REPO)} cites docs/{name}")
        if "DESIGN.md" in text and path != Path(__file__):
            missing.append(f"{path.relative_to(REPO)} cites DESIGN.md (not in the repository; cite docs/)")
    assert not missing, "\n".join(missing)
