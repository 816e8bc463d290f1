"""Bucketing geometry: which resolution tier and aspect-ratio shape an image is exported at.

Rules (docs/bucketing.md):

- Tier T holds about T² pixels. An image goes to the largest tier that does not upscale it by
  more than ``max_upscale`` (4/3) in side length, where "side length" is measured on the
  geometric mean of the sides: ``sqrt(T² / (width * height)) <= max_upscale``. So the 512
  tier's floor is (512 * 3/4)² = 384² = 147,456 pixels; smaller images are dropped
  (``too_small``). Aspect-ratio mismatch with the chosen shape and the rounding of shape sides
  to multiples of 16 can make the cover-resize scale along one side slightly larger than that
  (at most ``max_cover_scale(cfg)``, about 1.39 with the defaults).
- Aspect ratio is ``width / height``; images outside [ar_min, ar_max] are dropped
  (``aspect_ratio``).
- Each tier has ``shapes_per_tier`` shapes evenly spaced in log aspect ratio from ar_min to
  ar_max, sides rounded to the nearest multiple of ``multiple``, each close to T² pixels so
  every bucket costs the model about the same number of tokens.
- The aspect-ratio index comes from the image's own aspect ratio alone: the nearest of the
  ``shapes_per_tier`` ideal (unrounded) ratios in log space. The tier then only picks that
  index's shape. So an image and every uniformly scaled copy share the index in every tier
  (dedup compares them), and a copy rotated by 90 degrees gets the mirrored index when the
  range is symmetric (``ar_min * ar_max == 1``). Choosing after rounding the sides did not have
  this property: 4:3 sits almost exactly between two grid ratios, and the rounding of each tier
  tipped it to one or the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

TOO_SMALL: Final = "too_small"
ASPECT_RATIO: Final = "aspect_ratio"
INVALID_SIZE: Final = "invalid_image"

# Names the rule that maps an image to its bucket; part of the export version, so a change of
# rule marks every export stale (v2: the aspect index from the original ratio, not the rounded
# shape).
BUCKETING_VERSION: Final = "arindex-v2"

# Float slack for the tier floor, so that exactly 384x384 is not lost to 4/3 not being exact.
_REL_TOLERANCE: Final = 1e-9


class BucketConfig(BaseModel):
    """Bucketing parameters; hashable, so shape tables are computed once per config."""

    model_config = ConfigDict(frozen=True)

    tiers: tuple[int, ...] = (512, 1024, 2048, 4096)
    max_upscale: float = Field(4 / 3, ge=1.0)
    ar_min: float = Field(0.5, gt=0)
    ar_max: float = Field(2.0, gt=0)
    shapes_per_tier: int = Field(13, ge=1)
    multiple: int = Field(16, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> BucketConfig:
        if not self.tiers or any(t <= 0 for t in self.tiers):
            raise ValueError("tiers must be positive and non-empty")
        if list(self.tiers) != sorted(set(self.tiers)):
            raise ValueError("tiers must be strictly increasing")
        if self.ar_min > self.ar_max:
            raise ValueError("ar_min must not exceed ar_max")
        if self.ar_min < 1.0 < self.ar_max and self.shapes_per_tier < 2:
            raise ValueError("a range of aspect ratios needs at least 2 shapes per tier")
        if min(self.tiers) < 2 * self.multiple:
            raise ValueError("the smallest tier must be at least twice `multiple`")
        for tier in self.tiers:
            # A shape must name one aspect index: dedup and the tree key buckets by shape.
            if len(set(_shapes(tier, self))) < self.shapes_per_tier:
                raise ValueError(
                    f"tier {tier}: rounding sides to multiples of {self.multiple} gives two aspect "
                    "ratios the same shape; use fewer shapes per tier or a smaller multiple"
                )
        return self


@dataclass(frozen=True)
class Assignment:
    tier: int
    height: int
    width: int
    # Index of the shape in ``shapes_for_tier`` (the same for every tier); not part of equality,
    # since the shape already determines it.
    ar_index: int | None = field(default=None, compare=False)

    @property
    def bucket(self) -> str:
        """The MDS folder name and ``EXPORT_SCHEMA.bucket`` value."""
        return f"{self.height}x{self.width}"


@dataclass(frozen=True)
class Drop:
    """Why an image is not exported. ``reason`` is machine-readable; ``detail`` is for people."""

    reason: str  # too_small | aspect_ratio | invalid_image (| too_large | truncated from decode)
    detail: str = ""


def target_aspect_ratios(cfg: BucketConfig) -> list[float]:
    """Ideal (unrounded) aspect ratios, evenly spaced in log between ar_min and ar_max."""
    n = cfg.shapes_per_tier
    if n == 1:
        return [math.sqrt(cfg.ar_min * cfg.ar_max)]
    lo, hi = math.log(cfg.ar_min), math.log(cfg.ar_max)
    return [math.exp(lo + (hi - lo) * i / (n - 1)) for i in range(n)]


@lru_cache(maxsize=64)
def _shapes(tier: int, cfg: BucketConfig) -> tuple[tuple[int, int], ...]:
    m = cfg.multiple
    shapes = []
    for ar in target_aspect_ratios(cfg):
        height = max(m, m * round(tier / math.sqrt(ar) / m))
        width = max(m, m * round(tier * math.sqrt(ar) / m))
        shapes.append((height, width))
    return tuple(shapes)


def shapes_for_tier(tier: int, cfg: BucketConfig | None = None) -> list[tuple[int, int]]:
    """(height, width) of the tier's shapes, from the tallest to the widest."""
    return list(_shapes(tier, cfg or BucketConfig()))


@lru_cache(maxsize=64)
def _log_aspects(tier: int, cfg: BucketConfig) -> tuple[float, ...]:
    return tuple(math.log(w / h) for h, w in _shapes(tier, cfg))


def aspect_index(width: int, height: int, cfg: BucketConfig | None = None) -> int:
    """Index of the grid ratio nearest to ``width / height`` in log space (before any rounding).

    Computed from the reduced fraction, so a uniformly scaled copy gets exactly the same value,
    and as an offset from the grid's centre, so swapping the sides mirrors the index exactly on a
    symmetric grid. Ratios outside the range clamp to the end indexes.
    """
    cfg = cfg or BucketConfig()
    n = cfg.shapes_per_tier
    if width <= 0 or height <= 0:
        raise ValueError(f"invalid size {width}x{height}")
    if n == 1:
        return 0
    common = math.gcd(width, height)
    # log(p) - log(q) is exactly antisymmetric in (p, q); log(p / q) is not.
    log_ratio = math.log(width // common) - math.log(height // common)
    lo, hi = math.log(cfg.ar_min), math.log(cfg.ar_max)
    offset = (log_ratio - (lo + hi) / 2) / ((hi - lo) / (n - 1))
    distance = abs(offset)
    if n % 2:  # a centre index: ties at half steps go away from it, on both sides alike
        steps = math.floor(distance + 0.5)
        index = (n - 1) // 2 + (steps if offset >= 0 else -steps)
    else:  # the centre lies between two indexes
        steps = math.floor(distance)
        index = n // 2 + steps if offset >= 0 else n // 2 - 1 - steps
    return min(n - 1, max(0, index))


def shape_index(tier: int, height: int, width: int, cfg: BucketConfig | None = None) -> int | None:
    """Index of the shape ``height`` x ``width`` in the tier's table, or None if it is not one."""
    try:
        return _shapes(tier, cfg or BucketConfig()).index((height, width))
    except ValueError:
        return None


def fold_target(tier: int, index: int, candidates, cfg: BucketConfig | None = None, max_steps: int = 2) -> int | None:
    """The aspect index a sparse bucket of ``tier`` folds into, or None.

    ``candidates``: aspect indexes of the tier's buckets that are published on their own. The
    nearest one at most ``max_steps`` grid steps away wins; at equal distance the squarer shape
    (smaller ``|log(w/h)|``), so a fold crops the long side rather than widening the short one.
    """
    cfg = cfg or BucketConfig()
    shapes = _shapes(tier, cfg)
    best: tuple[tuple[int, float], int] | None = None
    for j in candidates:
        steps = abs(int(j) - index)
        if steps == 0 or steps > max_steps:
            continue
        height, width = shapes[j]
        key = (steps, abs(math.log(width / height)))
        if best is None or key < best[0]:
            best = (key, int(j))
    return None if best is None else best[1]


def fold_kept_share(steps: int, cfg: BucketConfig | None = None) -> float:
    """Share of the long side an image on a grid ratio keeps when folded ``steps`` grid steps
    (the rest is cropped): 0.89 per step with the default grid."""
    cfg = cfg or BucketConfig()
    if cfg.shapes_per_tier < 2:
        return 1.0
    step = (math.log(cfg.ar_max) - math.log(cfg.ar_min)) / (cfg.shapes_per_tier - 1)
    return math.exp(-steps * step)


def tier_floor_pixels(tier: int, cfg: BucketConfig | None = None) -> float:
    """Fewest source pixels the tier accepts: (tier / max_upscale)²."""
    cfg = cfg or BucketConfig()
    return (tier / cfg.max_upscale) ** 2


def choose_tier(width: int, height: int, cfg: BucketConfig | None = None) -> int | None:
    """Largest tier T with sqrt(T² / (width * height)) <= max_upscale, or None."""
    cfg = cfg or BucketConfig()
    pixels = width * height
    for tier in reversed(cfg.tiers):
        if tier * tier <= pixels * cfg.max_upscale**2 * (1 + _REL_TOLERANCE):
            return tier
    return None


def assign(width: int, height: int, cfg: BucketConfig | None = None) -> Assignment | Drop:
    """The bucket of an image of ``width`` x ``height`` pixels (as displayed), or why not."""
    cfg = cfg or BucketConfig()
    if width <= 0 or height <= 0:
        return Drop(INVALID_SIZE)
    # Compared as products so that exactly 2:1 or 1:2 stays inside the range.
    if width < cfg.ar_min * height or width > cfg.ar_max * height:
        return Drop(ASPECT_RATIO)
    tier = choose_tier(width, height, cfg)
    if tier is None:
        return Drop(TOO_SMALL)
    index = aspect_index(width, height, cfg)
    shape_height, shape_width = _shapes(tier, cfg)[index]
    return Assignment(tier, shape_height, shape_width, index)


def cover_scale(width: int, height: int, shape: Assignment) -> float:
    """Resize factor that makes the image cover the shape (the larger of the two side ratios)."""
    return max(shape.width / width, shape.height / height)


def max_cover_scale(cfg: BucketConfig | None = None) -> float:
    """Upper bound of ``cover_scale`` over all images the config accepts.

    max_upscale, times the worst aspect mismatch between an image and its index's shape (sqrt of
    the largest log distance from any ratio of the index's cell, half a grid step either side of
    the ideal ratio clipped to [ar_min, ar_max], to the rounded shape), times the worst
    shape-pixel excess over T² (sqrt).
    """
    cfg = cfg or BucketConfig()
    worst = 1.0
    lo, hi = math.log(cfg.ar_min), math.log(cfg.ar_max)
    n = cfg.shapes_per_tier
    half_step = (hi - lo) / (n - 1) / 2 if n > 1 else 0.0
    ideal = [math.log(ar) for ar in target_aspect_ratios(cfg)]
    for tier in cfg.tiers:
        logs = _log_aspects(tier, cfg)
        far = 0.0
        for centre, shape in zip(ideal, logs, strict=True):
            cell_lo = lo if n == 1 else max(lo, centre - half_step)
            cell_hi = hi if n == 1 else min(hi, centre + half_step)
            far = max(far, abs(cell_lo - shape), abs(cell_hi - shape))
        mismatch = math.exp(far / 2)
        excess = max(h * w for h, w in _shapes(tier, cfg)) / tier**2
        worst = max(worst, cfg.max_upscale * mismatch * math.sqrt(max(1.0, excess)))
    return worst


def shape_table(cfg: BucketConfig | None = None) -> str:
    """Human-readable table of every tier's floor and shapes (for a CLI)."""
    cfg = cfg or BucketConfig()
    lines = [
        f"aspect ratio (w/h) {cfg.ar_min:g}..{cfg.ar_max:g}, {cfg.shapes_per_tier} shapes per "
        f"tier, sides multiple of {cfg.multiple}, max upscale {cfg.max_upscale:.4g} "
        "(sqrt(T² / source pixels))"
    ]
    for tier in cfg.tiers:
        floor = tier_floor_pixels(tier, cfg)
        side = tier / cfg.max_upscale
        lines.append("")
        lines.append(f"tier {tier}: {tier * tier:,} px; sources from {floor:,.0f} px (~{side:.0f}²)")
        lines.append(f"  {'bucket HxW':>11}  {'w/h':>6}  {'pixels':>10}  {'vs T²':>7}")
        for height, width in _shapes(tier, cfg):
            pixels = height * width
            lines.append(f"  {f'{height}x{width}':>11}  {width / height:6.3f}  {pixels:10,}  {100 * (pixels / tier**2 - 1):+6.2f}%")
    return "\n".join(lines)
