from __future__ import annotations

import base64
import io

import pytest
from PIL import Image
from pydantic import ValidationError

from prx_data.models.captioning.images import ImageBudget, fit_size, image_data_url, load_for_captioning
from prx_data_tests.models.images import NOT_AN_IMAGE, image_bytes

BUDGET = ImageBudget(min_pixels=64 * 64, max_pixels=256 * 256, multiple=32)


@pytest.mark.parametrize("size", [(4000, 3000), (3000, 4000), (40, 30), (256, 256), (1000, 100), (33, 2000), (1, 1)])
def test_fit_size_stays_in_budget_on_the_grid_and_keeps_aspect(size):
    w, h = fit_size(size[0], size[1], BUDGET)
    assert BUDGET.min_pixels <= w * h <= BUDGET.max_pixels
    assert w % 32 == 0 and h % 32 == 0
    if 0.25 < size[0] / size[1] < 4:  # extreme ratios are bounded by the grid, not kept
        assert abs(w / h - size[0] / size[1]) / (size[0] / size[1]) < 0.25


def test_image_already_in_budget_on_the_grid_is_not_resized():
    assert fit_size(128, 96, BUDGET) == (128, 96)


def test_large_jpeg_is_shrunk_to_the_budget_and_exif_rotation_applied():
    image = Image.new("RGB", (2000, 1000), "blue")
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90°: displayed as portrait
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", exif=exif)
    out = load_for_captioning(buffer.getvalue(), BUDGET)
    assert out.mode == "RGB"
    assert out.height > out.width  # orientation applied
    assert out.width * out.height <= BUDGET.max_pixels


def test_data_url_is_a_jpeg_inside_the_budget():
    url = image_data_url(image_bytes("red", (20, 10)), BUDGET)
    assert url.startswith("data:image/jpeg;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert decoded.format == "JPEG"
    assert BUDGET.min_pixels <= decoded.width * decoded.height <= BUDGET.max_pixels


@pytest.mark.parametrize("data", [NOT_AN_IMAGE, b"", None, image_bytes()[:40]])
def test_undecodable_input_raises(data):
    with pytest.raises((OSError, ValueError)):
        load_for_captioning(data, BUDGET)


def test_budget_validation():
    with pytest.raises(ValidationError):
        ImageBudget(min_pixels=10_000, max_pixels=100)


@pytest.mark.parametrize("mode", ["RGBA", "LA", "P"])
def test_transparent_areas_become_white_not_black(mode):
    """A logo on a transparent background: the VLM must see white around it, not black."""
    image = Image.new("RGBA", (128, 128), (0, 0, 0, 0))  # transparent, hidden colour black
    image.paste((200, 20, 20, 255), (32, 32, 96, 96))
    if mode == "LA":
        image = image.convert("LA")
    elif mode == "P":  # a palette whose index 0 is transparent
        image = Image.new("P", (128, 128), 0)
        image.putpalette([0, 0, 0, 200, 20, 20] + [0] * 762)
        image.paste(1, (32, 32, 96, 96))
        image.info["transparency"] = 0
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    out = load_for_captioning(buffer.getvalue(), ImageBudget(min_pixels=32 * 32, max_pixels=128 * 128))
    assert out.mode == "RGB"
    corner, centre = out.getpixel((2, 2)), out.getpixel((64, 64))
    assert isinstance(corner, tuple) and isinstance(centre, tuple)
    assert min(corner) >= 250  # was the transparent area
    assert max(centre) <= 210  # the opaque shape kept


def test_remote_model_sources_are_refused_for_captions():
    from prx_data.models.captioning.config import VLLMCaptionerConfig

    with pytest.raises(ValidationError, match="local checkpoint"):
        VLLMCaptionerConfig(model_source="s3://models/Qwen3-VL-8B-Instruct")
