"""The data card's charts, through what ``corpus_report`` calls (``write_data_card``) on the
processed demo corpus: six PNGs beside the card and linked from it, drawn from numbers that
agree with the tables, the card's own counts and the explorer's skip count."""

from __future__ import annotations

import io
import json
from collections import Counter

import lance
from PIL import Image

from prx_data.curation.card_charts import CHARTS
from prx_data.curation.card_figures import CardFigures
from prx_data.curation.refresh import write_data_card
from prx_data.explorer.skips import SkipIndex
from prx_data.export.skiplist import iter_root_sidecars
from prx_data.export.tree import card_chart_path, card_figures_path
from prx_data.imaging.buckets import BucketConfig, choose_tier
from prx_data_tests.conftest import process_corpus_locally


def test_card_has_its_charts_and_their_numbers_agree(data_root) -> None:
    world = process_corpus_locally(data_root)
    paths, sources, mds = world["paths"], world["sources"], world["settings"].mds_root
    card, path = write_data_card(paths, sources, exclude_labels=(), bucket_cfg=BucketConfig())

    text = open(path).read()
    assert text == card.markdown
    for name, title in CHARTS.items():
        assert f"![{title}](charts/{name}.png)" in text
        with Image.open(card_chart_path(mds, name)) as image:  # a real PNG, of a readable size
            assert image.format == "PNG" and image.width >= 500 and image.height >= 150
    # Inline for the Dagster UI, which cannot fetch a file beside the card.
    embedded = card.embedded_markdown()
    assert embedded.count("](data:image/png;base64,") == len(CHARTS) and "](charts/" not in embedded

    figures = CardFigures.from_json(open(card_figures_path(mds)).read())
    usable = [
        r
        for s in sources
        for r in lance.dataset(paths.raw_table(s)).to_table(columns=["width", "height"], filter="status = 'ok'").to_pylist()
    ]
    assert sum(figures.megapixels.values()) == len(usable) == sum(sum(c.values()) for c in figures.aspect.values())
    tiers = Counter(str(choose_tier(r["width"], r["height"]) or "below") for r in usable)
    assert {k: sum(c.values()) for k, c in figures.aspect.items()} == dict(tiers)
    assert figures.tiers == [512, 1024, 2048, 4096] and len(figures.grid_ratios) == 13
    assert abs(figures.floors_mp[0] - 384 * 384 / 1e6) < 1e-9
    placed = Counter(
        f"{r['tier']}/{r['bucket']}"
        for s in sources
        for r in lance.dataset(paths.exports_table(s)).to_table(columns=["tier", "bucket"], filter="shard IS NOT NULL").to_pylist()
    )
    assert figures.buckets == dict(placed)
    sidecars: Counter[str] = Counter()
    for sidecar in iter_root_sidecars(mds, None):
        sidecars[sidecar.reason] += len(sidecar.indices)
    per_source: Counter[str] = Counter()
    for counts in figures.skips.values():
        per_source.update(counts)
    assert per_source == sidecars and sidecars  # the demo has skips (dedup, labels)
    # One count of "skipped" for the card's header, its metadata and the explorer's stats page.
    explorer_skipped = len(SkipIndex(mds).snapshot().by_sample)
    assert card.totals["skipped"] == explorer_skipped
    assert f"; {explorer_skipped} of them named by a skip list" in text
    assert card.totals["trainable"] == card.totals["exported"] - card.totals["excluded"]
    labels: Counter[str] = Counter()
    for counts in figures.labels.values():
        labels.update(counts)
    assert all(f"| {label} | {n} |" in text for label, n in labels.items())
    json.loads(figures.to_json())  # the file is plain JSON

    # Drawing is a small share of the card: matplotlib on six charts, measured, not guessed.
    assert 0 < card.chart_seconds < 30, card.chart_seconds
    print(f"charts: {card.chart_seconds:.2f} s for {len(card.charts)} PNGs, {sum(map(len, card.charts.values()))} bytes")


def test_empty_corpus_draws_empty_charts(tmp_path) -> None:
    from prx_data.core.paths import StoragePaths
    from prx_data.curation.report import build_data_card

    card = build_data_card(StoragePaths(lance_root=str(tmp_path / "lance"), mds_root=str(tmp_path / "mds")), [])
    assert set(card.charts) == set(CHARTS)
    for png in card.charts.values():
        with Image.open(io.BytesIO(png)) as image:
            assert image.format == "PNG"
