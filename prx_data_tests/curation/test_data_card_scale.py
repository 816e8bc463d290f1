"""The data card counts in Arrow over batches (issue 21 item 3): it used to hold every caption
of every source as a Python dict (about 1 KB a row: 100 GB at 100 M images) and every exported
id of the corpus in a Python set. Checked here: the card's numbers against the plain Python
count of the same rows, and a Python heap that does not grow with the source."""

from __future__ import annotations

import random
import statistics
import tracemalloc
from collections import Counter

import lance
import pyarrow as pa
import pytest

from prx_data.core.counts import word_histogram
from prx_data.core.histogram import median, summary_row
from prx_data.core.ids import sample_id
from prx_data.core.paths import StoragePaths
from prx_data.curation import report
from prx_data.curation.report import build_data_card

SOURCE = "web"
SPACES = [" ", "  ", "\t", "\n", " \u3000"]


def _caption(rng: random.Random) -> str | None:
    kind = rng.random()
    if kind < 0.05:
        return None
    if kind < 0.08:
        return ""
    if kind < 0.1:
        return "   "  # truthy, no words
    words = [f"w{rng.randrange(50)}" for _ in range(rng.randrange(1, 40))]
    text = "".join(w + rng.choice(SPACES) for w in words)
    return (rng.choice(SPACES) if rng.random() < 0.3 else "") + text


def _corpus(tmp_path, n: int) -> tuple[StoragePaths, list[dict], list[dict]]:
    rng = random.Random(n)
    paths = StoragePaths(lance_root=str(tmp_path / f"lance{n}"), mds_root=str(tmp_path / f"mds{n}"))
    raw = []
    for i in range(n):
        caption = _caption(rng)
        label = rng.choice(["visual", "text", "nsfw", None, ""]) if caption else None
        raw.append(
            {
                "sample_id": sample_id(SOURCE, str(i)),
                "status": rng.choice(["ok", "ok", "ok", "error"]),
                "caption": caption,
                "caption_model": rng.choice(["qwen3-vl-8b", None]),
                "caption_prompt_version": rng.choice([1, 2]),
                "label": label,
                "label_model": rng.choice(["qwen3-8b", "minilm"]) if label else None,
            }
        )
    exports = []
    for r in raw:
        dropped = rng.random() < 0.2
        exports.append(
            {
                "sample_id": r["sample_id"],
                "tier": rng.choice([256, 512, 1024]),
                "bucket": rng.choice(["16x16", "12x20"]),
                "drop_reason": rng.choice(["duplicate: of 12ab", "label: nsfw", "too_small: 40x40"]) if dropped else None,
            }
        )
    lance.write_dataset(pa.Table.from_pylist(raw), paths.raw_table(SOURCE))
    lance.write_dataset(pa.Table.from_pylist(exports), paths.exports_table(SOURCE))
    return paths, raw, exports


def _table(header, rows) -> str:
    return "\n".join(report._table(header, rows))


def test_summary_row_is_what_statistics_gives_on_the_whole_list():
    rng = random.Random(0)
    for size in (1, 2, 3, 9, 10, 11, 101, 1000):
        words = [rng.randrange(0, 30) for _ in range(size)]
        q = statistics.quantiles(words, n=10) if size > 1 else [words[0]] * 9
        expected = (min(words), round(q[0]), statistics.median(words), round(q[8]), max(words))
        assert summary_row(Counter(words)) == expected, words


def test_word_histogram_and_median_are_what_python_counts():
    rng = random.Random(1)
    captions = [_caption(rng) for _ in range(500)] + ["a\u00a0b", "\u3000x  y\t", "", "   "]
    words = [len(c.split()) for c in captions if c is not None]
    histogram = word_histogram(pa.array(captions, pa.string()))
    assert histogram == Counter(words)
    assert median(histogram) == statistics.median(words) and median(Counter()) == 0
    assert median(Counter([3, 4])) == 3.5


def test_card_numbers_are_the_plain_count_of_the_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "SCAN_ROWS", 1000)  # several batches
    paths, raw, exports = _corpus(tmp_path, 3000)
    card = build_data_card(paths, [SOURCE]).markdown

    kept = [e for e in exports if not e["drop_reason"]]
    usable = sum(r["status"] == "ok" for r in raw)
    assert _table(("source", "rows", "usable", "exported"), [(SOURCE, len(raw), usable, len(kept))]) in card
    assert _table(("tier", "samples"), sorted(Counter(e["tier"] for e in kept).items())) in card
    buckets = Counter(f"{e['tier']}/{e['bucket']}" for e in kept)
    assert _table(("bucket", "samples"), sorted(buckets.items())) in card
    drops = Counter(e["drop_reason"].split(":", 1)[0] for e in exports if e["drop_reason"])
    assert _table(("reason", "samples"), sorted(drops.items())) in card
    labelled = [r for r in raw if r["label"]]
    assert _table(("label", "captions"), sorted(Counter(r["label"] for r in labelled).items())) in card
    assert f"Label models: {dict(Counter(r['label_model'] for r in labelled))}." in card
    captioned = [r for r in raw if r["caption"]]
    words = [len(r["caption"].split()) for r in captioned]
    q = statistics.quantiles(words, n=10)
    expected = [(min(words), round(q[0]), statistics.median(words), round(q[8]), max(words))]
    assert _table(("min", "p10", "median", "p90", "max"), expected) in card
    models = Counter(f"{r['caption_model']} / prompt {r['caption_prompt_version']}" for r in captioned)
    assert _table(("captioner / prompt", "captions"), sorted(models.items())) in card
    assert f"{len(kept)} samples exported; 0 of them named by a skip list (0 left out of training, 0 folded" in card
    assert f"**{len(kept)} trainable**" in card


def _peak(tmp_path, n: int) -> int:
    paths, _, _ = _corpus(tmp_path, n)
    tracemalloc.start()
    try:
        # Without the charts: they are drawn from counts, the same few figures at any size.
        card = build_data_card(paths, [SOURCE], charts=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert card.totals["exported"] > 0
    return peak


@pytest.mark.timeout(300)
def test_python_heap_does_not_grow_with_the_source(tmp_path, monkeypatch):
    monkeypatch.setattr(report, "SCAN_ROWS", 4096)
    small, large = _peak(tmp_path, 10_000), _peak(tmp_path, 40_000)
    # Counts only: tens of KB whatever the size (20 -> 32 KB here). The rows as Python dicts
    # and the ids in a set took 10.7 -> 42.9 MB.
    assert large < 1_000_000 and large < 4 * small, f"Python heap {small} -> {large} bytes for 4x the rows"


@pytest.mark.parametrize("partitions", [1, 8])
def test_skipped_exports_are_counted_one_sample_id_range_at_a_time(tmp_path, partitions):
    """Distinct exported ids and how many of them are skipped, from ids spilled by range: the
    counts of one range add up to the set arithmetic over the whole source."""
    from prx_data.core.spill import SpilledPartitions, range_bounds

    rng = random.Random(9)
    exported = [sample_id(SOURCE, f"k{rng.randrange(2000)}") for _ in range(3000)]  # with repeats
    skipped = [rng.choice(exported) for _ in range(400)] + [sample_id(SOURCE, f"gone{i}") for i in range(50)]
    bounds = range_bounds(partitions)
    spills = []
    for name, ids in (("exported", exported), ("skipped", skipped)):
        spill = SpilledPartitions(str(tmp_path / f"{name}-{partitions}"), report._IDS, bounds)
        for start in range(0, len(ids), 128):
            spill.add(pa.table({"sample_id": ids[start : start + 128]}))
        spills.append(spill)
    assert report._exported_and_skipped(*spills) == (len(set(exported)), len(set(exported) & set(skipped)))
    if partitions > 1:
        assert max(len(spills[0].read(p)) for p in range(partitions)) < len(exported) / 4  # a range, not the source
