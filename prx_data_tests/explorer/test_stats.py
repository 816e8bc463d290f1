"""The stats page's charts carry the same numbers as the exports tables and the sidecars."""

from __future__ import annotations

from collections import Counter

from prx_data.explorer.charts import bar_chart
from prx_data_tests.explorer.helpers import all_rows, chart, exports, sidecar_reasons

SOURCES = ["archive", "links", "photos", "shards", "web"]


def test_charts_match_the_tables(client, corpus):
    html = client.get("/stats").text
    rows = [r for s in SOURCES for r in exports(corpus.settings, s)]
    placed = [r for r in rows if r["shard"]]
    assert chart(html, "chart-tiers") == {f"{t} px": n for t, n in Counter(r["tier"] for r in placed).items()}
    buckets = chart(html, "chart-buckets")
    want = Counter(f"{r['tier']}/{r['bucket']}" for r in placed)
    assert {label.split()[0]: n for label, n in buckets.items()} == dict(want)
    assert chart(html, "chart-export") == dict(Counter(r["drop_reason"].split(":")[0] for r in rows if r["drop_reason"]))
    statuses = Counter(r["status"] for r in all_rows(corpus.settings, SOURCES, ["status"]))
    assert chart(html, "chart-ingest") == {s: n for s, n in statuses.items() if s != "ok"}
    per_reason = Counter(reason for reasons in sidecar_reasons(corpus.settings.mds_root).values() for reason in reasons)
    assert chart(html, "chart-skips") == dict(per_reason)


def test_buckets_are_ordered_by_aspect_ratio_within_a_tier(client):
    labels = list(chart(client.get("/stats").text, "chart-buckets"))
    ratios = [(int(label.split("/")[0]), float(label.split("w/h ")[1].rstrip(")"))) for label in labels]
    assert ratios == sorted(ratios)


def test_chart_escapes_labels_and_scales_bars():
    svg = str(bar_chart("t<", [("<script>x</script>", 10), ("b", 5)]))
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert 'width="360"' in svg and 'width="180"' in svg  # longest bar = largest value
    assert "nothing to show" in str(bar_chart("empty", []))


def test_skipped_total_counts_samples_once(client, corpus):
    reasons = sidecar_reasons(corpus.settings.mds_root)
    pairs = sum(len(r) for r in reasons.values())
    html = client.get("/stats").text
    assert f'id="skipped-total">{len(reasons)} samples ({pairs} sample-reason pairs)' in html
