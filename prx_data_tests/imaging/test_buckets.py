from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from prx_data.imaging.buckets import (
    Assignment,
    BucketConfig,
    Drop,
    assign,
    choose_tier,
    cover_scale,
    max_cover_scale,
    shape_table,
    shapes_for_tier,
    target_aspect_ratios,
)

DEFAULT = BucketConfig()
sides = st.integers(min_value=1, max_value=12_000)


@st.composite
def configs(draw: st.DrawFn) -> BucketConfig:
    multiple = draw(st.sampled_from([8, 16, 32, 64]))
    smallest = draw(st.integers(min_value=8, max_value=40)) * multiple
    tiers = sorted({smallest * 2**k for k in range(draw(st.integers(1, 4)))})
    ar_min = draw(st.floats(min_value=0.25, max_value=0.9))
    return BucketConfig(
        tiers=tuple(tiers),
        max_upscale=draw(st.floats(min_value=1.0, max_value=2.0)),
        ar_min=ar_min,
        ar_max=max(1.01, 1 / ar_min * draw(st.floats(min_value=0.8, max_value=1.25))),
        shapes_per_tier=draw(st.integers(min_value=2, max_value=21)),
        multiple=multiple,
    )


def _pixel_tolerance(tier: int, cfg: BucketConfig) -> float:
    """Largest relative pixel error that rounding each side to ``multiple`` can cause."""
    short = tier * math.sqrt(min(cfg.ar_min, 1 / cfg.ar_max))
    long = tier / math.sqrt(min(cfg.ar_min, 1 / cfg.ar_max))
    return (1 + cfg.multiple / 2 / short) * (1 + cfg.multiple / 2 / long) - 1


def test_default_table_matches_the_design() -> None:
    assert DEFAULT.tiers == (512, 1024, 2048, 4096)
    for tier in DEFAULT.tiers:
        shapes = shapes_for_tier(tier)
        assert len(shapes) == 13
        assert (tier, tier) in shapes  # the middle shape is square
        for height, width in shapes:
            assert height % 16 == 0 and width % 16 == 0
            assert abs(height * width / tier**2 - 1) < 0.025
    assert shapes_for_tier(1024)[0] == (1456, 720)  # tallest
    assert shapes_for_tier(1024)[-1] == (720, 1456)  # widest


def test_boundaries() -> None:
    assert assign(384, 384) == Assignment(512, 512, 512)  # floor: upscale exactly 4/3
    assert assign(383, 384) == Drop("too_small")
    assert assign(768, 768).tier == 1024  # type: ignore[union-attr]
    assert assign(767, 768).tier == 512  # type: ignore[union-attr]
    assert isinstance(assign(1000, 500), Assignment)  # exactly 2:1 is inside
    assert isinstance(assign(500, 1000), Assignment)
    assert assign(1001, 500) == Drop("aspect_ratio")
    assert assign(500, 1001) == Drop("aspect_ratio")
    assert assign(0, 10) == Drop("invalid_image")
    assert assign(40_000, 30_000).tier == 4096  # type: ignore[union-attr]
    assert Assignment(1024, 816, 1296).bucket == "816x1296"


@settings(max_examples=60, deadline=None)
@given(configs())
def test_shapes_invariants(cfg: BucketConfig) -> None:
    ideal = target_aspect_ratios(cfg)
    step = math.log(ideal[1] / ideal[0])
    for a, b in zip(ideal, ideal[1:]):
        assert math.log(b / a) == pytest.approx(step)  # evenly spaced in log aspect ratio
    assert ideal[0] == pytest.approx(cfg.ar_min) and ideal[-1] == pytest.approx(cfg.ar_max)
    for tier in cfg.tiers:
        shapes = shapes_for_tier(tier, cfg)
        assert len(shapes) == cfg.shapes_per_tier
        tolerance = _pixel_tolerance(tier, cfg)
        for (height, width), ar in zip(shapes, ideal, strict=True):
            assert height % cfg.multiple == 0 and width % cfg.multiple == 0
            assert abs(height * width / tier**2 - 1) <= tolerance + 1e-12
            # each side moves by at most half a multiple from its ideal length
            half_w = cfg.multiple / 2 / (tier * math.sqrt(ar))
            half_h = cfg.multiple / 2 / (tier / math.sqrt(ar))
            slack = max(
                math.log((1 + half_w) / (1 - half_h)), math.log((1 + half_h) / (1 - half_w))
            )
            assert abs(math.log(width / height / ar)) <= slack + 1e-12


@settings(max_examples=400, deadline=None)
@given(sides, sides)
def test_assign_invariants_default(width: int, height: int) -> None:
    _check_assignment(width, height, DEFAULT)


@settings(max_examples=150, deadline=None)
@given(configs(), sides, sides)
def test_assign_invariants_any_config(cfg: BucketConfig, width: int, height: int) -> None:
    _check_assignment(width, height, cfg)


def _check_assignment(width: int, height: int, cfg: BucketConfig) -> None:
    result = assign(width, height, cfg)
    pixels = width * height
    aspect = width / height
    in_range = cfg.ar_min * height <= width <= cfg.ar_max * height
    fits = [t for t in cfg.tiers if math.sqrt(t * t / pixels) <= cfg.max_upscale * (1 + 1e-9)]
    if not in_range:
        assert result == Drop("aspect_ratio")
        return
    if not fits:
        assert result == Drop("too_small")
        return
    assert isinstance(result, Assignment)
    # The largest tier that does not upscale by more than max_upscale (geometric-mean side).
    assert result.tier == max(fits) == choose_tier(width, height, cfg)
    bigger = [t for t in cfg.tiers if t > result.tier]
    if bigger:
        assert math.sqrt(bigger[0] ** 2 / pixels) > cfg.max_upscale
    # The nearest shape of that tier in log aspect ratio.
    shapes = shapes_for_tier(result.tier, cfg)
    assert (result.height, result.width) in shapes
    distance = abs(math.log(result.width / result.height / aspect))
    assert all(distance <= abs(math.log(w / h / aspect)) + 1e-12 for h, w in shapes)
    # Per-side cover scale may exceed max_upscale only by the documented aspect/rounding slack.
    assert cover_scale(width, height, result) <= max_cover_scale(cfg) + 1e-9


def test_max_cover_scale_default_is_small() -> None:
    assert 4 / 3 < max_cover_scale() < 1.40


def test_shape_table_lists_every_bucket() -> None:
    table = shape_table()
    for tier in DEFAULT.tiers:
        assert f"tier {tier}:" in table
        for height, width in shapes_for_tier(tier):
            assert f"{height}x{width}" in table
    assert "147,456" in table  # the 512 tier's floor, 384²


def test_config_is_validated_and_hashable() -> None:
    with pytest.raises(ValidationError):
        BucketConfig(tiers=(1024, 512))
    with pytest.raises(ValidationError):
        BucketConfig(ar_min=2.0, ar_max=0.5)
    with pytest.raises(ValidationError):
        BucketConfig(max_upscale=0.9)
    with pytest.raises(ValidationError):
        DEFAULT.tiers = (512,)  # type: ignore[misc]
    assert hash(BucketConfig()) == hash(DEFAULT)
    assert BucketConfig(tiers=(256,), shapes_per_tier=1, ar_min=1, ar_max=1).tiers == (256,)
