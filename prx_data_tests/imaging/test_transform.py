from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, JpegImagePlugin

from prx_data.imaging.buckets import Assignment, BucketConfig, Drop, assign
from prx_data.imaging.decode import open_image
from prx_data.imaging.transform import (
    Prepared,
    cover_box,
    encode_jpeg,
    prepare,
    resize_cover_crop,
)
from prx_data_tests.imaging.helpers import jpeg_bytes, photo, png_bytes, psnr


def _prepared(data: bytes, cfg: BucketConfig | None = None) -> tuple[Prepared, Image.Image]:
    result = prepare(data, cfg)
    assert isinstance(result, Prepared), result
    image = Image.open(io.BytesIO(result.jpeg))
    assert image.format == "JPEG" and image.mode == "RGB"
    assert image.size == (result.width, result.height)
    return result, image


def _reference(image: Image.Image, height: int, width: int) -> Image.Image:
    """The obvious slow path: full RGB image, Lanczos cover resize, centre crop."""
    scale = max(width / image.width, height / image.height)
    size = (round(image.width * scale), round(image.height * scale))
    big = image.convert("RGB").resize(size, Image.Resampling.LANCZOS)
    left, top = (big.width - width) // 2, (big.height - height) // 2
    return big.crop((left, top, left + width, top + height))


def test_jpeg_uses_pillows_quality_92_tables_and_420() -> None:
    result, image = _prepared(jpeg_bytes(photo(0)))
    reference = Image.open(io.BytesIO(jpeg_bytes(Image.new("RGB", (16, 16)), quality=92)))
    assert isinstance(image, JpegImagePlugin.JpegImageFile) and isinstance(reference, JpegImagePlugin.JpegImageFile)
    assert image.quantization == reference.quantization
    assert JpegImagePlugin.get_sampling(image) == 2  # 4:2:0
    assert encode_jpeg(Image.new("L", (16, 16))).startswith(b"\xff\xd8")


def test_photo_goes_to_its_bucket_with_original_size_recorded() -> None:
    source = photo(1, megapixels=(1.0, 2.0))
    result, image = _prepared(jpeg_bytes(source))
    expected = assign(*source.size)
    assert isinstance(expected, Assignment)
    assert (result.tier, result.height, result.width) == (
        expected.tier,
        expected.height,
        expected.width,
    )
    assert (result.original_width, result.original_height) == source.size
    assert result.bucket == f"{result.height}x{result.width}"
    # The YCbCr / half-chroma path stays close to the plain RGB Lanczos path.
    decoded = Image.open(io.BytesIO(jpeg_bytes(source))).convert("RGB")
    reference = _reference(decoded, result.height, result.width)
    # observed 36.8 dB: q92 loss on a grainy photo, plus the reference's whole-pixel crop
    assert psnr(image, reference) > 35


@pytest.mark.parametrize("index", range(3))
def test_fast_path_matches_plain_rgb_path(index: int) -> None:
    data = jpeg_bytes(photo(index, seed=4, megapixels=(0.6, 1.0)))
    fast = _prepared(data)[1]
    plain = open_image(data)
    slow = Image.open(io.BytesIO(encode_jpeg(resize_cover_crop(plain, fast.height, fast.width))))
    assert psnr(fast, slow) > 43  # observed 45.5-46.3 dB


def test_cover_crop_keeps_the_centre() -> None:
    image = Image.new("RGB", (400, 200), (0, 0, 0))
    image.paste((255, 255, 255), (190, 0, 210, 200))  # a white bar in the middle
    out = np.asarray(resize_cover_crop(image, 100, 100))
    assert out.shape == (100, 100, 3)
    assert out[50, 50].min() > 240 and out[50, 5].max() < 15 and out[50, 94].max() < 15
    assert cover_box((0, 0, 400, 200), 100, 100) == (100, 0, 300, 200)
    assert cover_box((0, 0, 200, 400), 100, 200) == (0, 150, 200, 250)


def test_large_downscale_uses_a_reduced_decode_without_losing_quality() -> None:
    source = photo(2, megapixels=(3.0, 3.2))
    data = jpeg_bytes(source, quality=95)
    cfg = BucketConfig(tiers=(512,))  # 3 MP -> 0.26 MP: decoded at 1/2 scale
    result, image = _prepared(data, cfg)
    assert result.tier == 512
    reference = _reference(open_image(data), result.height, result.width)
    assert psnr(image, reference) > 39  # observed about 42.5 dB


def test_cmyk_jpeg() -> None:
    cmyk = Image.new("CMYK", (640, 480), (0, 255, 255, 0))
    _, image = _prepared(jpeg_bytes(cmyk))
    r, g, b = np.asarray(image).reshape(-1, 3).mean(axis=0)
    assert r > 235 and g < 20 and b < 20


def test_16_bit_png() -> None:
    # 608x432 is exactly the 512 tier's 432x608 shape: no side is cropped, so both ends of the
    # ramp reach the output (4:3 would crop the sides of the wider shape of its aspect index).
    ramp = np.tile(np.linspace(0, 65535, 608).astype(np.uint16), (432, 1))
    _, image = _prepared(png_bytes(Image.fromarray(ramp)))
    row = np.asarray(image)[image.height // 2, :, 0].astype(int)
    assert row[:5].max() < 10 and row[-5:].min() > 245  # full range kept, not clipped
    assert 110 < row[image.width // 2] < 145


def test_palette_with_transparency_and_rgba_on_white() -> None:
    palette = Image.new("P", (640, 480), 1)
    palette.putpalette([255, 0, 0] + [0, 0, 255] * 255)
    palette.paste(0, (0, 0, 320, 480))
    _, image = _prepared(png_bytes(palette, transparency=1))
    pixels = np.asarray(image)
    assert pixels[240, 100].tolist() == pytest.approx([255, 0, 0], abs=12)  # red half kept
    assert pixels[240, 500].min() > 245  # transparent half is white

    rgba = Image.new("RGBA", (640, 480), (0, 0, 0, 0))
    rgba.paste((0, 0, 0, 255), (0, 0, 320, 480))
    _, image = _prepared(png_bytes(rgba))
    pixels = np.asarray(image)
    assert pixels[240, 100].max() < 12 and pixels[240, 500].min() > 245


def test_exif_rotated_jpeg_is_bucketed_as_displayed() -> None:
    stored = Image.new("RGB", (800, 500), (0, 0, 255))
    stored.paste((255, 0, 0), (0, 0, 400, 500))  # left half red as stored
    exif = Image.Exif()
    exif[0x0112] = 8  # displayed rotated 90 degrees counter-clockwise: 500 wide, 800 tall
    result, image = _prepared(jpeg_bytes(stored, exif=exif.tobytes()))
    assert (result.original_width, result.original_height) == (500, 800)
    assert result.height > result.width
    pixels = np.asarray(image)
    assert pixels[-10, result.width // 2][0] > 200  # stored left half is now at the bottom
    assert pixels[10, result.width // 2][2] > 200


def test_animated_gif_first_frame() -> None:
    frames = [Image.new("RGB", (600, 400), c) for c in ((255, 0, 0), (0, 0, 255))]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], duration=40)
    _, image = _prepared(buffer.getvalue())
    r, g, b = np.asarray(image).reshape(-1, 3).mean(axis=0)
    assert r > 235 and b < 20


def test_drops_have_reasons() -> None:
    good = jpeg_bytes(photo(3))
    assert prepare(jpeg_bytes(Image.new("RGB", (300, 300)))) == Drop("too_small")
    assert prepare(jpeg_bytes(Image.new("RGB", (1200, 400)))) == Drop("aspect_ratio")
    cases = {
        b"": "invalid_image",
        b"garbage": "invalid_image",
        good[: len(good) // 3]: "truncated",
    }
    for data, reason in cases.items():
        result = prepare(data)
        assert isinstance(result, Drop) and result.reason == reason and result.detail
    too_large = prepare(good, max_pixels=1000)
    assert isinstance(too_large, Drop) and too_large.reason == "too_large"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_prepare_never_raises_on_corrupted_bytes(data: st.DataObject) -> None:
    original = _CORRUPTION_BASE
    position = data.draw(st.integers(0, len(original) - 1))
    length = data.draw(st.integers(1, 64))
    noise = data.draw(st.binary(min_size=length, max_size=length))
    cut = data.draw(st.booleans())
    corrupted = original[:position] + noise + (b"" if cut else original[position + length :])
    assert isinstance(prepare(corrupted), Prepared | Drop)


_CORRUPTION_BASE = jpeg_bytes(Image.new("RGB", (400, 400), (30, 120, 200)), quality=80)
