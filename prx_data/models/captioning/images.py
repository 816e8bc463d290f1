"""Prepare an image for a VLM: decode, orient, fit a pixel budget, re-encode.

Resizing here, before the engine, makes the number of vision tokens per image predictable
(and so the batch's memory and throughput), whatever the source resolution.
"""

from __future__ import annotations

import base64
import io
import math
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

if TYPE_CHECKING:
    # Pillow is imported where images are decoded: the code location imports this module for
    # ImageBudget alone.
    from PIL import Image

# Qwen3-VL turns each 32x32 block into one vision token (patch 16, merged 2x2). Sides that are
# multiples of it are not resized again by the model's own processor.
QWEN3_VL_FACTOR = 32


class ImageBudget(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # Defaults: 128 to 1024 vision tokens per image.
    min_pixels: int = Field(128 * 32 * 32, ge=1)
    max_pixels: int = Field(1024 * 32 * 32, ge=1)
    multiple: int = Field(QWEN3_VL_FACTOR, ge=1)
    jpeg_quality: int = Field(90, ge=1, le=100)

    @model_validator(mode="after")
    def _ordered(self) -> ImageBudget:
        if self.min_pixels > self.max_pixels:
            raise ValueError("min_pixels must not exceed max_pixels")
        if self.min_pixels < self.multiple * self.multiple:
            raise ValueError("min_pixels must hold at least one multiple x multiple block")
        return self


def fit_size(width: int, height: int, budget: ImageBudget) -> tuple[int, int]:
    """The (width, height) closest in area to the original inside [min_pixels, max_pixels],
    aspect ratio kept, both sides multiples of ``budget.multiple``."""
    if width <= 0 or height <= 0:
        raise ValueError(f"bad image size {width}x{height}")
    m = budget.multiple
    area = width * height
    scale = 1.0
    if area > budget.max_pixels:
        scale = math.sqrt(budget.max_pixels / area)
    elif area < budget.min_pixels:
        scale = math.sqrt(budget.min_pixels / area)
    w = max(m, round(width * scale / m) * m)
    h = max(m, round(height * scale / m) * m)
    # Rounding to the grid can step just outside the budget; step back inside on the long side.
    while w * h > budget.max_pixels and max(w, h) > m:
        if w >= h:
            w -= m
        else:
            h -= m
    while w * h < budget.min_pixels:
        if w <= h:
            w += m
        else:
            h += m
    return w, h


def load_for_captioning(data: bytes | None, budget: ImageBudget) -> Image.Image:
    """Decode ``data`` into an RGB image fitted to the budget. Raises on missing or undecodable input."""
    from PIL import Image, ImageOps

    if not data:
        raise ValueError("empty image bytes")
    opened = Image.open(io.BytesIO(data))
    if opened.format == "JPEG":
        # Let libjpeg decode at a reduced scale when the target is much smaller: several times
        # faster on large photos, and the VLM cannot see the difference at this budget. The
        # size is computed before EXIF rotation, which only swaps the sides.
        opened.draft("RGB", fit_size(*opened.size, budget))
    image = to_rgb_on_white(ImageOps.exif_transpose(opened))
    size = fit_size(*image.size, budget)
    if size != image.size:
        image = image.resize(size, Image.Resampling.BICUBIC)
    return image


def to_rgb_on_white(image: Image.Image) -> Image.Image:
    """RGB with transparent areas composited on white. A plain ``convert("RGB")`` drops the
    alpha channel, so a transparent background becomes whatever colour the hidden pixels hold
    (usually black), and the VLM describes a black background that is not there."""
    has_alpha = image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (image.mode == "P" and "transparency" in image.info)
    if not has_alpha:
        return image.convert("RGB")
    from PIL import Image

    rgba = image.convert("RGBA")
    white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(white, rgba).convert("RGB")


def to_data_url(image: Image.Image, quality: int = 90) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def image_data_url(data: bytes | None, budget: ImageBudget) -> str:
    return to_data_url(load_for_captioning(data, budget), budget.jpeg_quality)
