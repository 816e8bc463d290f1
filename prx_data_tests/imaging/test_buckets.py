from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from prx_data.imaging.buckets import (
    Assignment,
    BucketConfig,
    Drop,
    aspect_index,
    assign,
    choose_tier,
    cover_scale,
    max_cover_scale,
    shape_index,
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
    try:
        return BucketConfig(
            tiers=tuple(tiers),
            max_upscale=draw(st.floats(min_value=1.0, max_value=2.0)),
            ar_min=ar_min,
            ar_max=max(1.01, 1 / ar_min * draw(st.floats(min_value=0.8, max_value=1.25))),
            shapes_per_tier=draw(st.integers(min_value=2, max_value=21)),
            multiple=multiple,
        )
    except ValidationError:
        assume(False)  # two ratios round to one shape: rejected by design (see test below)
        raise


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
            slack = max(math.log((1 + half_w) / (1 - half_h)), math.log((1 + half_h) / (1 - half_w)))
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
    # The index is the nearest ideal (unrounded) grid ratio; the tier only picks its shape.
    shapes = shapes_for_tier(result.tier, cfg)
    ideal = target_aspect_ratios(cfg)
    assert result.ar_index is not None
    distance = abs(math.log(ideal[result.ar_index] / aspect))
    assert all(distance <= abs(math.log(ar / aspect)) + 1e-9 for ar in ideal)
    assert (result.height, result.width) == shapes[result.ar_index]
    assert shape_index(result.tier, result.height, result.width, cfg) == result.ar_index
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
    with pytest.raises(ValidationError, match="same shape"):
        BucketConfig(tiers=(64,), ar_min=0.875, ar_max=1.01, shapes_per_tier=3, multiple=8)
    with pytest.raises(ValidationError):
        DEFAULT.tiers = (512,)  # type: ignore[misc]
    assert hash(BucketConfig()) == hash(DEFAULT)
    assert BucketConfig(tiers=(256,), shapes_per_tier=1, ar_min=1, ar_max=1).tiers == (256,)


# One aspect index per image, whatever the tier ------------------------------------------------
def _symmetric(cfg: BucketConfig) -> BucketConfig:
    try:
        return BucketConfig(**{**cfg.model_dump(), "ar_max": 1 / cfg.ar_min})
    except ValidationError:
        assume(False)
        raise


ratios = st.tuples(st.integers(1, 400), st.integers(1, 400)).filter(lambda pq: 0.5 <= pq[0] / pq[1] <= 2.0)


@settings(max_examples=300, deadline=None)
@given(ratios, st.integers(1, 60), st.integers(1, 60))
def test_scaled_copies_share_the_index_in_every_tier(pq: tuple[int, int], m1: int, m2: int) -> None:
    # Two exact scales of one picture (down to the floor and below): same index, and each
    # tier's shape is that index's shape.
    p, q = pq
    results = [assign(p * m, q * m) for m in (m1, m2, 1, 97)]
    placed = [r for r in results if isinstance(r, Assignment)]
    assert {r.ar_index for r in placed} <= {aspect_index(p, q)}
    for r in placed:
        assert r.ar_index is not None
        assert (r.height, r.width) == shapes_for_tier(r.tier)[r.ar_index]


@settings(max_examples=300, deadline=None)
@given(sides.filter(lambda s: s >= 384), sides.filter(lambda s: s >= 384), st.floats(0.05, 1.0))
def test_rounded_downscales_share_the_index_unless_on_a_boundary(width: int, height: int, scale: float) -> None:
    # A real downscale rounds each side to whole pixels; that moves the ratio by at most
    # ~1/short side, so only ratios that close to a cell boundary may change index.
    small = (max(1, round(width * scale)), max(1, round(height * scale)))
    first, second = assign(width, height), assign(*small)
    if not (isinstance(first, Assignment) and isinstance(second, Assignment)):
        return
    moved = abs(math.log(small[0] / small[1]) - math.log(width / height))
    ideal = [math.log(ar) for ar in target_aspect_ratios(DEFAULT)]
    boundaries = [(a + b) / 2 for a, b in zip(ideal, ideal[1:])]
    near = min(abs(math.log(width / height) - b) for b in boundaries)
    if near > moved:
        assert first.ar_index == second.ar_index


def test_four_by_three_and_its_half_size_copy_share_a_bucket_index() -> None:
    # The case that escaped dedup: 4:3 sits between grid ratios 1.26 and 1.41.
    big, half = assign(1152, 864), assign(576, 432)
    assert isinstance(big, Assignment) and isinstance(half, Assignment)
    assert (big.tier, half.tier) == (1024, 512)
    assert big.ar_index == half.ar_index == 8
    for w, h in ((4000, 3000), (2000, 1500), (1024, 768), (640, 480), (444, 333)):
        assert assign(w, h).ar_index == 8  # type: ignore[union-attr]


@settings(max_examples=150, deadline=None)
@given(configs(), sides, sides)
def test_rotated_copies_get_the_mirrored_index(cfg: BucketConfig, width: int, height: int) -> None:
    cfg = _symmetric(cfg)
    n = cfg.shapes_per_tier
    if n % 2 == 0 and width == height:
        return  # a square between two central shapes has no mirror-symmetric answer
    assert aspect_index(height, width, cfg) == n - 1 - aspect_index(width, height, cfg)
    a, b = assign(width, height, cfg), assign(height, width, cfg)
    if isinstance(a, Assignment):
        assert isinstance(b, Assignment) and b.tier == a.tier
        assert a.ar_index is not None
        assert b.ar_index == n - 1 - a.ar_index
        assert (b.height, b.width) == (a.width, a.height) or abs(b.height - a.width) <= cfg.multiple


def test_exif_rotated_photo_gets_the_mirrored_bucket() -> None:
    from prx_data.imaging.transform import prepare
    from prx_data_tests.images import exif_rotated_jpeg

    rotated = prepare(exif_rotated_jpeg(1152, 864))  # stored 1152x864, displayed 864x1152
    upright = assign(1152, 864)
    assert not isinstance(rotated, Drop) and isinstance(upright, Assignment)
    assert (rotated.height, rotated.width) == (upright.width, upright.height)
    assert upright.ar_index is not None
    turned = assign(864, 1152)
    assert isinstance(turned, Assignment) and turned.ar_index == 12 - upright.ar_index
