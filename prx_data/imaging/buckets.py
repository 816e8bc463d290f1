"""Bucketing geometry: which resolution tier and aspect-ratio shape an image is exported at.

Rules (DESIGN.md "Bucketing"):

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
- An image takes the shape of its tier nearest in log aspect ratio.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, model_validator

TOO_SMALL: Final = "too_small"
ASPECT_RATIO: Final = "aspect_ratio"
INVALID_SIZE: Final = "invalid_image"

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
    def _consistent(self) -> "BucketConfig":
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
        return self


@dataclass(frozen=True)
class Assignment:
    tier: int
    height: int
    width: int

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
    log_ar = math.log(width / height)
    logs = _log_aspects(tier, cfg)
    best = min(range(len(logs)), key=lambda i: abs(logs[i] - log_ar))
    shape_height, shape_width = _shapes(tier, cfg)[best]
    return Assignment(tier, shape_height, shape_width)


def cover_scale(width: int, height: int, shape: Assignment) -> float:
    """Resize factor that makes the image cover the shape (the larger of the two side ratios)."""
    return max(shape.width / width, shape.height / height)


def max_cover_scale(cfg: BucketConfig | None = None) -> float:
    """Upper bound of ``cover_scale`` over all images the config accepts.

    max_upscale, times the worst aspect mismatch with the nearest shape (sqrt of the largest
    half-gap between neighbouring shapes, or between an end shape and ar_min/ar_max), times
    the worst shape-pixel excess over T² (sqrt).
    """
    cfg = cfg or BucketConfig()
    worst = 1.0
    lo, hi = math.log(cfg.ar_min), math.log(cfg.ar_max)
    for tier in cfg.tiers:
        logs = sorted(_log_aspects(tier, cfg))
        # Largest distance from any accepted log-aspect to its nearest shape.
        gaps = [(b - a) / 2 for a, b in zip(logs, logs[1:], strict=False)]
        gaps += [max(0.0, logs[0] - lo), max(0.0, hi - logs[-1])]
        mismatch = math.exp(max(gaps) / 2)
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
        lines.append(
            f"tier {tier}: {tier * tier:,} px; sources from {floor:,.0f} px (~{side:.0f}²)"
        )
        lines.append(f"  {'bucket HxW':>11}  {'w/h':>6}  {'pixels':>10}  {'vs T²':>7}")
        for height, width in _shapes(tier, cfg):
            pixels = height * width
            lines.append(
                f"  {f'{height}x{width}':>11}  {width / height:6.3f}  {pixels:10,}  "
                f"{100 * (pixels / tier**2 - 1):+6.2f}%"
            )
    return "\n".join(lines)
