"""The numbers behind the data card's charts: histograms and per-source counts, accumulated one
batch at a time (no row is held), saved as JSON beside the card so every view of the card (the
Markdown file, the ``corpus_report`` materialization, the explorer) draws the same numbers.

Resolution and aspect ratio are read from the raw table's usable rows (``status = 'ok'``), so the
histograms show what the tier floors and the aspect range cut away, not only what was kept. A
row's tier is the tier the export's rule gives its size (``imaging.buckets.choose_tier``).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.imaging.buckets import BucketConfig, target_aspect_ratios, tier_floor_pixels

# Bin edges, log-spaced: megapixels from 0.01 to 100, aspect ratios (width / height) from 1/4 to 4.
# Values past either end are counted in the first or last bin.
MP_EDGES: tuple[float, ...] = tuple(float(x) for x in np.geomspace(0.01, 100.0, 49))
ASPECT_EDGES: tuple[float, ...] = tuple(float(x) for x in np.geomspace(0.25, 4.0, 49))
# Tier key of rows below every tier's floor.
BELOW = "below"
_REL_TOLERANCE = 1e-9  # as imaging.buckets: exactly 384x384 stays in the 512 tier


def _bins(values: np.ndarray, edges: tuple[float, ...]) -> Counter[int]:
    index = np.clip(np.searchsorted(np.asarray(edges), values, side="right") - 1, 0, len(edges) - 2)
    counts = np.bincount(index, minlength=len(edges) - 1)
    return Counter({int(i): int(n) for i, n in enumerate(counts) if n})


@dataclass
class CardFigures:
    """Counts only; ``tiers``, ``floors_mp`` and ``grid_ratios`` come from the bucket config."""

    tiers: list[int] = field(default_factory=list)
    floors_mp: list[float] = field(default_factory=list)  # each tier's floor in megapixels
    grid_ratios: list[float] = field(default_factory=list)  # the shapes' ideal width / height
    ar_range: tuple[float, float] = (0.5, 2.0)
    megapixels: Counter[int] = field(default_factory=Counter)  # MP bin -> usable rows
    aspect: dict[str, Counter[int]] = field(default_factory=dict)  # tier (or BELOW) -> aspect bin -> rows
    words: Counter[int] = field(default_factory=Counter)  # caption words -> captions
    labels: dict[str, Counter[str]] = field(default_factory=dict)  # source -> label -> captions
    skips: dict[str, Counter[str]] = field(default_factory=dict)  # source -> skip reason -> sidecar entries
    buckets: dict[str, int] = field(default_factory=dict)  # "tier/HxW" -> exported samples
    unpublished: list[str] = field(default_factory=list)  # buckets without an index (not trained)

    @classmethod
    def for_config(cls, cfg: BucketConfig) -> CardFigures:
        return cls(
            tiers=list(cfg.tiers),
            floors_mp=[tier_floor_pixels(t, cfg) / 1e6 for t in cfg.tiers],
            grid_ratios=target_aspect_ratios(cfg),
            ar_range=(cfg.ar_min, cfg.ar_max),
        )

    def add_sizes(self, width: pa.Array, height: pa.Array, max_upscale: float) -> None:
        """Count usable rows' sizes (nulls and non-positive sizes left out)."""
        valid = pc.and_(pc.greater(pc.fill_null(width, 0), 0), pc.greater(pc.fill_null(height, 0), 0))
        w = np.asarray(pc.filter(width, valid).to_numpy(zero_copy_only=False), dtype=np.float64)
        h = np.asarray(pc.filter(height, valid).to_numpy(zero_copy_only=False), dtype=np.float64)
        if not len(w):
            return
        pixels = w * h
        self.megapixels.update(_bins(pixels / 1e6, MP_EDGES))
        tier = np.full(len(w), -1, dtype=np.int64)
        for t in sorted(self.tiers):  # ascending: the largest tier that fits wins
            tier[t * t <= pixels * max_upscale**2 * (1 + _REL_TOLERANCE)] = t
        ratio = w / h
        for t in np.unique(tier):
            key = BELOW if t < 0 else str(int(t))
            self.aspect.setdefault(key, Counter()).update(_bins(ratio[tier == t], ASPECT_EDGES))

    def to_json(self) -> str:
        data = {
            **{k: getattr(self, k) for k in ("tiers", "floors_mp", "grid_ratios", "buckets", "unpublished")},
            "ar_range": list(self.ar_range),
            "megapixels": dict(self.megapixels),
            "aspect": {k: dict(v) for k, v in self.aspect.items()},
            "words": dict(self.words),
            "labels": {k: dict(v) for k, v in self.labels.items()},
            "skips": {k: dict(v) for k, v in self.skips.items()},
        }
        return json.dumps(data, sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str) -> CardFigures:
        data = json.loads(text)
        ints = lambda d: Counter({int(k): int(v) for k, v in d.items()})  # noqa: E731
        return cls(
            tiers=[int(t) for t in data["tiers"]],
            floors_mp=[float(x) for x in data["floors_mp"]],
            grid_ratios=[float(x) for x in data["grid_ratios"]],
            ar_range=(float(data["ar_range"][0]), float(data["ar_range"][1])),
            megapixels=ints(data["megapixels"]),
            aspect={k: ints(v) for k, v in data["aspect"].items()},
            words=ints(data["words"]),
            labels={k: Counter(v) for k, v in data["labels"].items()},
            skips={k: Counter(v) for k, v in data["skips"].items()},
            buckets={k: int(v) for k, v in data["buckets"].items()},
            unpublished=list(data["unpublished"]),
        )


def bin_centres(edges: tuple[float, ...]) -> list[float]:
    """The geometric middle of each bin (the edges are log-spaced)."""
    return [math.sqrt(a * b) for a, b in zip(edges, edges[1:])]
