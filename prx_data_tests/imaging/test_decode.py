from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from prx_data.imaging import decode
from prx_data.imaging.decode import (
    DecodeError,
    load_pixels,
    open_for_hash,
    open_image,
    picture_box,
    read_header,
)
from prx_data_tests.imaging.helpers import jpeg_bytes, photo, png_bytes


def _exif_oriented_jpeg(image: Image.Image, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return jpeg_bytes(image, exif=exif.tobytes())


def _reason(data: bytes, **kwargs: int) -> str:
    with pytest.raises(DecodeError) as info:
        open_image(data, **kwargs)
    return info.value.reason


def test_reduction_factor_follows_pillows_draft_rule() -> None:
    assert decode.reduction_factor((1001, 603), (64, 64)) == 8
    assert decode.reduction_factor((500, 600), (64, 64)) == 4
    assert decode.reduction_factor((200, 200), (64, 64)) == 2
    assert decode.reduction_factor((100, 2000), (64, 64)) == 1
    assert decode.reduction_factor((10, 10), (64, 64)) == 1


def test_plain_jpeg_is_rgb_at_full_size() -> None:
    original = photo(0)
    image = open_image(jpeg_bytes(original))
    assert image.mode == "RGB" and image.size == original.size


def test_cmyk_jpeg_becomes_the_same_colours_in_rgb() -> None:
    cmyk = Image.new("CMYK", (64, 48), (0, 255, 255, 0))  # pure red in CMYK
    data = jpeg_bytes(cmyk)
    assert Image.open(io.BytesIO(data)).mode == "CMYK"  # Adobe (inverted) CMYK JPEG
    r, g, b = np.asarray(open_image(data)).reshape(-1, 3).mean(axis=0)
    assert r > 240 and g < 15 and b < 15


def test_16_bit_png_is_scaled_not_clipped() -> None:
    ramp = np.array([[0, 257, 40000, 65535]], dtype=np.uint16)
    data = png_bytes(Image.fromarray(ramp))
    assert Image.open(io.BytesIO(data)).mode == "I;16"
    gray = np.asarray(open_image(data))[0, :, 0]
    assert gray.tolist() == [0, 1, 156, 255]  # Pillow's own convert("L") gives 255 for 40000


def test_mode_i_is_taken_as_16_bit() -> None:
    image = Image.fromarray(np.array([[0, 32768, 65535, 70000]], dtype=np.int32), "I")
    assert np.asarray(decode.to_rgb(image))[0, :, 0].tolist() == [0, 128, 255, 255]


def test_float_mode_in_unit_range_is_scaled() -> None:
    image = Image.fromarray(np.array([[0.0, 0.5, 1.0]], dtype=np.float32), "F")
    assert np.asarray(decode.to_rgb(image))[0, :, 0].tolist() == [0, 128, 255]


def test_palette_transparency_is_composited_on_white() -> None:
    image = Image.new("P", (8, 8), 0)
    image.putpalette([255, 0, 0] + [0, 0, 255] * 255)
    image.paste(1, (0, 0, 4, 8))
    data = png_bytes(image, transparency=1)  # index 1 (blue) is transparent
    pixels = np.asarray(open_image(data))
    assert pixels[0, 0].tolist() == [255, 255, 255]
    assert pixels[0, 7].tolist() == [255, 0, 0]


def test_rgba_and_la_are_composited_on_white() -> None:
    rgba = Image.new("RGBA", (4, 1), (0, 0, 0, 0))
    rgba.putpixel((1, 0), (0, 0, 0, 255))
    rgba.putpixel((2, 0), (0, 0, 0, 128))
    pixels = np.asarray(open_image(png_bytes(rgba)))[0]
    assert pixels[0].tolist() == [255, 255, 255]
    assert pixels[1].tolist() == [0, 0, 0]
    assert 120 <= pixels[2][0] <= 135
    la = Image.new("LA", (2, 1), (0, 0))
    assert np.asarray(open_image(png_bytes(la)))[0, 0].tolist() == [255, 255, 255]


def test_exif_orientation_is_applied_and_header_reports_displayed_size() -> None:
    stored = Image.new("RGB", (60, 40), (0, 0, 255))
    stored.paste((255, 0, 0), (0, 0, 30, 40))  # left half red as stored
    data = _exif_oriented_jpeg(stored, 6)  # display rotated 90 degrees clockwise
    header = read_header(data)
    assert (header.width, header.height) == (40, 60)
    image = open_image(data)
    assert image.size == (40, 60)
    top, bottom = np.asarray(image)[5, 20], np.asarray(image)[55, 20]
    assert top[0] > 200 and top[2] < 60  # stored left half is now on top
    assert bottom[2] > 200 and bottom[0] < 60


def test_animated_gif_gives_its_first_frame() -> None:
    frames = [Image.new("RGB", (16, 16), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    buffer = io.BytesIO()
    frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], duration=50)
    image = open_image(buffer.getvalue())
    assert image.mode == "RGB"
    assert np.asarray(image)[8, 8].tolist() == [255, 0, 0]


def test_broken_files_have_reasons() -> None:
    good = jpeg_bytes(photo(1))
    assert _reason(b"") == "invalid_image"
    assert _reason(b"definitely not an image") == "invalid_image"
    assert _reason(good[: len(good) // 2]) == "truncated"
    assert _reason(good, max_pixels=1000) == "too_large"
    # EPS is refused before Pillow's plugin could call Ghostscript.
    assert _reason(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n") == "invalid_image"
    error = DecodeError("truncated", "x")
    assert error.status == "invalid_image" and str(error) == "truncated: x"


def test_pillow_bomb_guard_is_reported_as_too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)
    assert _reason(png_bytes(Image.new("RGB", (20, 20))), max_pixels=10**9) == "too_large"


def test_rgb_stored_jpeg_falls_back_when_ycbcr_is_requested() -> None:
    data = jpeg_bytes(photo(2), keep_rgb=True)
    image = load_pixels(read_header(data), "YCbCr", (50, 50))
    assert image.mode == "RGB" and min(image.size) >= 50


def test_ycbcr_is_only_given_for_colour_jpegs() -> None:
    assert load_pixels(read_header(jpeg_bytes(photo(3))), "YCbCr").mode == "YCbCr"
    assert load_pixels(read_header(png_bytes(photo(3))), "YCbCr").mode == "RGB"
    gray_jpeg = jpeg_bytes(photo(3).convert("L"))
    assert load_pixels(read_header(gray_jpeg), "YCbCr").mode == "RGB"


def test_hash_decode_is_reduced_grayscale_with_the_exact_picture_box() -> None:
    stored = photo(4).resize((1001, 603))
    image, box = open_for_hash(jpeg_bytes(stored))
    assert image.mode == "L"
    assert image.size == (126, 76)  # 1/8 scale keeps >= 64 px on each side
    assert box == (0, 0, 1001 / 8, 603 / 8)
    # Other formats are block-averaged by the same factor, with the same geometry.
    png_image, png_box = open_for_hash(png_bytes(stored))
    assert png_image.size == (126, 76) and png_box == box


@pytest.mark.parametrize(
    ("orientation", "expected"),
    [
        (1, (0, 0, 125.125, 75.375)),
        (2, (0.875, 0, 126, 75.375)),
        (3, (0.875, 0.625, 126, 76)),
        (4, (0, 0.625, 125.125, 76)),
        (5, (0, 0, 75.375, 125.125)),
        (6, (0.625, 0, 76, 125.125)),
        (7, (0.625, 0.875, 76, 126)),
        (8, (0, 0.875, 75.375, 126)),
    ],
)
def test_picture_box_follows_exif_orientation(orientation: int, expected: tuple[float, ...]) -> None:
    # The partial last block of a 1001x603 frame decoded at 1/8 ends up on whichever side
    # the orientation moves the stored right/bottom edges to.
    data = _exif_oriented_jpeg(photo(5).resize((1001, 603)), orientation)
    header = read_header(data)
    image = load_pixels(header, "L", (64, 64))
    assert picture_box(header, image) == pytest.approx(expected)


def test_png_header_is_cheap_and_png_exif_orientation_is_applied() -> None:
    image = photo(6)
    data = png_bytes(image)
    truncated = data[: len(data) // 2]
    assert read_header(truncated).width == image.width  # header only: no pixels decoded yet
    assert _reason(truncated) == "truncated"
    exif = Image.Exif()
    exif[0x0112] = 6
    rotated = png_bytes(image, exif=exif.tobytes())
    assert read_header(rotated).orientation == 6
    assert open_image(rotated).size == (image.height, image.width)


def test_rgb_colour_key_transparency_is_composited() -> None:
    image = Image.new("RGB", (4, 1), (10, 20, 30))
    image.putpixel((3, 0), (200, 0, 0))
    pixels = np.asarray(open_image(png_bytes(image, transparency=(10, 20, 30))))[0]
    assert pixels[0].tolist() == [255, 255, 255] and pixels[3].tolist() == [200, 0, 0]


def test_cmyk_jpeg_hash_decode_is_reduced_gray() -> None:
    cmyk = Image.new("CMYK", (800, 600), (0, 255, 255, 0))
    image, box = open_for_hash(jpeg_bytes(cmyk))
    assert image.mode == "L" and image.size == (100, 75) and box == (0, 0, 100, 75)
