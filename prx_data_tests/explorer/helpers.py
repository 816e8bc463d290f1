"""Reading the explorer's pages in tests, and the truth to compare them with."""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict

import lance

from prx_data.core.paths import StoragePaths

CARD_RE = re.compile(r'<div class="card" data-sample-id="([0-9a-f]{32})" data-source="([a-z0-9_-]+)">')
BAR_RE = re.compile(r'<g class="bar" data-label="([^"]*)" data-value="(\d+)">')


def cards(html: str) -> list[tuple[str, str]]:
    """(source, sample_id) of each result card, in page order."""
    return [(source, sid) for sid, source in CARD_RE.findall(html)]


def card_ids(html: str) -> set[str]:
    return {sid for _, sid in cards(html)}


def section(html: str, element_id: str) -> str:
    """The markup from the element with ``id`` on, whitespace collapsed (enough for asserts)."""
    start = html.index(f'id="{element_id}"')
    return re.sub(r"\s+", " ", html[start : start + 4000]).replace("> <", "><")


def chart(html: str, figure_id: str) -> dict[str, int]:
    start = html.index(f'id="{figure_id}"')
    end = html.index("</figure>", start)
    return {label: int(value) for label, value in BAR_RE.findall(html[start:end])}


def exports(settings, source: str) -> list[dict]:
    uri = StoragePaths.from_settings(settings).exports_table(source)
    return lance.dataset(uri).to_table(columns=["sample_id", "tier", "bucket", "shard", "index_in_shard", "drop_reason"]).to_pylist()


def sidecar_reasons(mds_root: str) -> dict[str, set[str]]:
    """sample_id -> reasons, read straight from the sidecar files."""
    out: dict[str, set[str]] = defaultdict(set)
    for dirpath, _dirs, files in os.walk(mds_root):
        for name in files:
            if ".skip." in name and name.endswith(".json"):
                obj = json.loads(open(os.path.join(dirpath, name), "rb").read())
                for sid in obj["sample_ids"]:
                    out[sid].add(obj["reason"])
    return dict(out)


def all_rows(settings, sources: list[str], columns: list[str]) -> list[dict]:
    paths = StoragePaths.from_settings(settings)
    rows = []
    for source in sources:
        rows.extend(lance.dataset(paths.raw_table(source)).to_table(columns=columns).to_pylist())
    return rows
