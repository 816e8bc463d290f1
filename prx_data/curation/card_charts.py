"""The data card's charts as PNG, drawn with matplotlib (Agg: no display, no GUI toolkit).

One PNG per chart, drawn from :class:`~prx_data.curation.card_figures.CardFigures`; the same
bytes are written beside the card (``_reports/charts/``), embedded in the ``corpus_report``
materialization and served by the explorer, so the three never disagree.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable

from prx_data.curation.card_figures import ASPECT_EDGES, BELOW, MP_EDGES, CardFigures

# name -> title; the order is the card's.
CHARTS: dict[str, str] = {
    "megapixels": "Resolution of usable images (megapixels), with each tier's floor",
    "aspect_ratio": "Aspect ratio (width / height) per tier, with the grid's ratios",
    "caption_words": "Caption length (words)",
    "labels_per_source": "Caption labels per source",
    "skips_per_source": "Skip-list reasons per source",
    "buckets": "Exported samples per bucket, published for training or not",
}
DPI = 80
_COLOURS = ("#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#4b5563")


def _pyplot():
    # lazy: matplotlib costs ~0.3 s to import; only the card's writer draws
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _empty(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what}", ha="center", va="center", color="#6b7280", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _edges_bar(ax, counts: Counter[int], edges: tuple[float, ...], colour: str, label: str | None = None, step: bool = False) -> None:
    heights = [counts.get(i, 0) for i in range(len(edges) - 1)]
    if step:
        ax.stairs(heights, edges, color=colour, label=label, linewidth=1.6)
    else:
        ax.stairs(heights, edges, color=colour, fill=True, alpha=0.8, label=label)


def _megapixels(ax, f: CardFigures) -> None:
    if not f.megapixels:
        return _empty(ax, "usable images")
    _edges_bar(ax, f.megapixels, MP_EDGES, _COLOURS[0])
    ax.set_xscale("log")
    for tier, floor in zip(f.tiers, f.floors_mp):
        ax.axvline(floor, color=_COLOURS[2], linestyle="--", linewidth=1)
        ax.text(floor, 1.0, f" {tier}", color=_COLOURS[2], fontsize=8, va="top", transform=ax.get_xaxis_transform())
    ax.set_xlabel("megapixels (tier floors dashed)")
    ax.set_ylabel("images")


def _aspect(ax, f: CardFigures) -> None:
    if not f.aspect:
        return _empty(ax, "usable images")
    order = sorted((k for k in f.aspect if k != BELOW), key=int) + ([BELOW] if BELOW in f.aspect else [])
    for i, key in enumerate(order):
        label = "below every floor" if key == BELOW else f"tier {key}"
        _edges_bar(ax, f.aspect[key], ASPECT_EDGES, _COLOURS[i % len(_COLOURS)], label, step=True)
    ax.set_xscale("log")
    ax.set_xticks([0.25, 0.5, 0.75, 1, 1.5, 2, 4], ["1/4", "1/2", "3/4", "1", "3/2", "2", "4"])
    ax.minorticks_off()
    for ratio in f.grid_ratios:
        ax.axvline(ratio, color="#9ca3af", linewidth=0.7)
    lo, hi = f.ar_range
    ax.axvspan(ASPECT_EDGES[0], lo, color="#fee2e2", zorder=0)
    ax.axvspan(hi, ASPECT_EDGES[-1], color="#fee2e2", zorder=0)
    ax.set_xlabel(f"width / height ({len(f.grid_ratios)} grid ratios grey; outside the range shaded)")
    ax.set_ylabel("images")
    ax.legend(fontsize=7)


def _words(ax, f: CardFigures) -> None:
    if not f.words:
        return _empty(ax, "captions")
    top = max(f.words)
    width = max(1, -(-top // 60))  # at most ~60 bars
    binned: Counter[int] = Counter()
    for words, n in f.words.items():
        binned[words // width * width] += n
    ax.bar(list(binned), list(binned.values()), width=width, align="edge", color=_COLOURS[1])
    ax.set_xlabel("words per caption")
    ax.set_ylabel("captions")


def _stacked(ax, per_source: dict[str, Counter[str]], what: str) -> None:
    sources = sorted(s for s, c in per_source.items() if sum(c.values()))
    if not sources:
        return _empty(ax, what)
    keys = sorted({k for s in sources for k in per_source[s]})
    left = [0] * len(sources)
    for i, key in enumerate(keys):
        values = [per_source[s].get(key, 0) for s in sources]
        ax.barh(sources, values, left=left, color=_COLOURS[i % len(_COLOURS)], label=key)
        left = [a + b for a, b in zip(left, values)]
    ax.invert_yaxis()
    ax.set_xlabel(what)
    ax.legend(fontsize=7, loc="lower right")


def _buckets(ax, f: CardFigures) -> None:
    if not f.buckets:
        return _empty(ax, "exported samples")
    unpublished = set(f.unpublished)

    def order(key: str) -> tuple[int, float]:
        tier, _, shape = key.partition("/")
        h, _, w = shape.partition("x")
        return int(tier), int(w) / int(h)

    keys = sorted(f.buckets, key=order)
    colours = [_COLOURS[2] if k in unpublished else _COLOURS[0] for k in keys]
    ax.bar(range(len(keys)), [f.buckets[k] for k in keys], color=colours)
    ax.set_xticks(range(len(keys)), keys, rotation=90, fontsize=7)
    ax.set_ylabel("samples")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=_COLOURS[0], label="published"), Patch(color=_COLOURS[2], label="not published")], fontsize=7)


_DRAW: dict[str, Callable] = {
    "megapixels": _megapixels,
    "aspect_ratio": _aspect,
    "caption_words": _words,
    "labels_per_source": lambda ax, f: _stacked(ax, f.labels, "captions"),
    "skips_per_source": lambda ax, f: _stacked(ax, f.skips, "samples"),
    "buckets": _buckets,
}


def render_charts(figures: CardFigures) -> dict[str, bytes]:
    """name -> PNG bytes of every chart in :data:`CHARTS`."""
    plt = _pyplot()
    out = {}
    for name, title in CHARTS.items():
        tall = name in ("labels_per_source", "skips_per_source")
        rows = len(figures.labels if name == "labels_per_source" else figures.skips) if tall else 0
        fig, ax = plt.subplots(figsize=(8, max(2.5, 0.9 + 0.35 * rows) if tall else 3.4), dpi=DPI)
        try:
            ax.set_title(title, fontsize=10)
            _DRAW[name](ax, figures)
            fig.tight_layout()
            buffer = io.BytesIO()
            # No timestamp or software tag: equal figures give equal bytes.
            fig.savefig(buffer, format="png", metadata={"Software": None})
            out[name] = buffer.getvalue()
        finally:
            plt.close(fig)
    return out
