"""Export transform: encoded image -> bucket-shaped JPEG q92 bytes, or a drop with a reason.

``prepare`` is what the export stage calls per row: header -> bucket (``buckets.assign``) ->
decode (at a reduced JPEG scale when the bucket is at most half the size) -> sRGB (an image
with an embedded non-sRGB profile is converted through it, ``colour``) -> Lanczos resize
covering the bucket with a centre crop -> JPEG quality 92, 4:2:0, no profile (sRGB).

Speed: for ordinary colour JPEGs the pixels stay in YCbCr. The luma plane is resampled at the
bucket size and the two chroma planes at half of it, which is all the 4:2:0 output keeps; that
removes a third of the Lanczos work (the largest cost) and two colour conversions. Every
channel is still resampled with Lanczos, and the chroma values the encoder stores are exactly
the half-size Lanczos output (each is repeated 2x2 and the encoder averages 2x2 blocks).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Final

from PIL import Image

from prx_data.imaging.buckets import Assignment, BucketConfig, Drop, assign
from prx_data.imaging.colour import identify
from prx_data.imaging.decode import (
    DEFAULT_MAX_PIXELS,
    INVALID_IMAGE,
    Box,
    DecodeError,
    load_pixels,
    picture_box,
    read_header,
)

JPEG_QUALITY: Final = 92
# Pinned rather than left to Pillow's default, so the promise "JPEG q92 4:2:0" cannot drift
# with a Pillow upgrade.
JPEG_SUBSAMPLING: Final = "4:2:0"
LANCZOS: Final = Image.Resampling.LANCZOS
# Downscales by more than 3x first average whole pixel blocks (Image.reduce), then resample
# the rest with Lanczos: Pillow documents 3.0 as indistinguishable from a full Lanczos pass.
REDUCING_GAP: Final = 3.0


@dataclass(frozen=True)
class Prepared:
    jpeg: bytes
    tier: int
    height: int
    width: int
    original_width: int
    original_height: int

    @property
    def bucket(self) -> str:
        return f"{self.height}x{self.width}"


def cover_box(box: Box, height: int, width: int) -> Box:
    """The centred part of ``box`` with the aspect ratio of a height x width target."""
    left, top, right, bottom = box
    box_w, box_h = right - left, bottom - top
    if box_w * height > box_h * width:  # wider than the target: trim left and right
        crop_w = box_h * width / height
        left += (box_w - crop_w) / 2
        return (left, top, left + crop_w, bottom)
    crop_h = box_w * height / width  # taller (or equal): trim top and bottom
    top += (box_h - crop_h) / 2
    return (left, top, right, top + crop_h)


def resize_cover_crop(image: Image.Image, height: int, width: int, box: Box | None = None) -> Image.Image:
    """Lanczos resize that covers height x width, centre-cropped to it, in one resample.

    Only the crop is resampled (Pillow's ``box``), so no work is spent on pixels that would be
    cut away. ``box`` is the part of ``image`` holding the picture (``decode.picture_box``);
    by default the whole image.
    """
    full = box or (0.0, 0.0, float(image.width), float(image.height))
    crop = cover_box(full, height, width)
    return image.resize((width, height), LANCZOS, box=crop, reducing_gap=REDUCING_GAP)


def encode_jpeg(image: Image.Image, quality: int = JPEG_QUALITY) -> bytes:
    """Baseline JPEG at ``quality``, 4:2:0, no metadata. Accepts RGB, L or YCbCr images."""
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality, subsampling=JPEG_SUBSAMPLING)
    return buffer.getvalue()


def prepare(
    data: bytes,
    cfg: BucketConfig | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    shape: Assignment | None = None,
) -> Prepared | Drop:
    """Bucket, resize and encode one image; any problem becomes a ``Drop`` with a reason.

    Reasons: ``invalid_image``, ``too_large``, ``truncated`` (decode), ``too_small``,
    ``aspect_ratio`` (bucketing). Never raises for bad input. ``shape`` overrides the shape the
    image is cover-cropped to (the fold policy's neighbouring shape of the same tier); the image
    must still be exportable on its own.
    """
    cfg = cfg or BucketConfig()
    try:
        header = read_header(data, max_pixels)
        target = assign(header.width, header.height, cfg)
        if isinstance(target, Drop):
            return target
        target = shape or target
        scale = max(target.width / header.width, target.height / header.height)
        # Decode no smaller than the resized (pre-crop) image, so the reduced JPEG decode
        # never costs resolution the bucket keeps.
        min_size = (math.ceil(header.width * scale), math.ceil(header.height * scale))
        converted = identify(header.image).converts
        pixels = load_pixels(header, "YCbCr", min_size, srgb=True)
        if converted and pixels.mode == "RGB":
            # Converted to sRGB, the pixels take the YCbCr path too: the encoder would make
            # YCbCr of them anyway, and chroma resampled at half size halves the resize.
            pixels = pixels.convert("YCbCr")
        box = picture_box(header, pixels)
        if pixels.mode == "YCbCr":
            resized = _resize_ycbcr_for_420(pixels, target, box)
        else:
            resized = resize_cover_crop(pixels, target.height, target.width, box)
        jpeg = encode_jpeg(resized)
    except DecodeError as exc:
        return Drop(exc.reason, exc.message)
    except Exception as exc:  # anything unforeseen stays a per-row error
        return Drop(INVALID_IMAGE, f"prepare failed: {type(exc).__name__}: {exc}"[:500])
    return Prepared(jpeg, target.tier, target.height, target.width, header.width, header.height)


def _resize_ycbcr_for_420(image: Image.Image, target: Assignment, box: Box) -> Image.Image:
    """Cover-crop resize of a YCbCr image whose chroma will be stored at half resolution.

    Luma: Lanczos to the bucket. Chroma: halved by 2x2 averaging (the decoder upsampled it from
    the file's half-resolution planes, for 4:2:0 sources), Lanczos to half the bucket, then
    repeated 2x2 so the encoder's 4:2:0 averaging stores exactly those values. Bucket sides are
    multiples of 16, hence even; odd sizes fall back to a plain resize.
    """
    height, width = target.height, target.width
    if height % 2 or width % 2:
        return resize_cover_crop(image, height, width, box)
    crop = cover_box(box, height, width)
    luma, cb, cr = image.split()
    luma = luma.resize((width, height), LANCZOS, box=crop, reducing_gap=REDUCING_GAP)
    half_crop = (crop[0] / 2, crop[1] / 2, crop[2] / 2, crop[3] / 2)
    chroma = [
        plane.reduce(2)
        .resize((width // 2, height // 2), LANCZOS, box=half_crop, reducing_gap=REDUCING_GAP)
        .resize((width, height), Image.Resampling.NEAREST)
        for plane in (cb, cr)
    ]
    return Image.merge("YCbCr", (luma, *chroma))
