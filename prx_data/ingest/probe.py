"""Cheap validation of image bytes at ingest: header, dimensions as displayed, structure.

Ingest must run near the speed of copying bytes, so nothing is fully decoded here: the header
gives format and size, EXIF gives the orientation, and a look at the file's tail catches
truncated JPEG/PNG files. Full decodes happen later, in the stages that need pixels.
"""

from __future__ import annotations

import hashlib
import io
import warnings
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from prx_data.schema import Status

# EXIF orientations 5..8 rotate by 90 degrees: the displayed image has width and height swapped.
_ORIENTATION_TAG = 0x0112
_TRANSPOSED = {5, 6, 7, 8}

_JPEG_EOI = b"\xff\xd9"
_PNG_IEND = b"IEND\xaeB`\x82"


@dataclass(frozen=True)
class Probe:
    status: Status
    error: str | None = None
    image_format: str | None = None
    width: int | None = None
    height: int | None = None
    sha256: str | None = None


def _truncation_error(data: bytes, fmt: str) -> str | None:
    tail = data[-1024:].rstrip(b"\x00\r\n ")
    if fmt == "JPEG" and not tail.endswith(_JPEG_EOI):
        return "truncated JPEG: no end-of-image marker"
    if fmt == "PNG" and _PNG_IEND not in data[-64:]:
        return "truncated PNG: no IEND chunk"
    return None


def probe_image(data: bytes | None, max_pixels: int, max_bytes: int | None = None) -> Probe:
    """Classify ``data`` as usable or not, with a readable reason."""
    if data is None:
        return Probe(Status.MISSING, "no image data")
    sha = hashlib.sha256(data).hexdigest()
    if len(data) == 0:
        return Probe(Status.INVALID_IMAGE, "empty file (0 bytes)", sha256=sha)
    if max_bytes is not None and len(data) > max_bytes:
        return Probe(Status.TOO_LARGE, f"{len(data)} bytes exceeds the limit of {max_bytes}", sha256=sha)
    try:
        with warnings.catch_warnings():
            # The pixel limit is enforced below with our own threshold and message.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            previous = Image.MAX_IMAGE_PIXELS
            Image.MAX_IMAGE_PIXELS = None
            try:
                img = Image.open(io.BytesIO(data))
            finally:
                Image.MAX_IMAGE_PIXELS = previous
            fmt = img.format or "unknown"
            width, height = img.size
            orientation = img.getexif().get(_ORIENTATION_TAG, 1) if fmt in ("JPEG", "PNG", "WEBP", "TIFF") else 1
    except UnidentifiedImageError:
        return Probe(Status.INVALID_IMAGE, "not a recognised image format", sha256=sha)
    except Exception as exc:  # noqa: BLE001 - any parser failure is a property of the row
        return Probe(Status.INVALID_IMAGE, f"unreadable image header: {exc}", sha256=sha)
    if width <= 0 or height <= 0:
        return Probe(Status.INVALID_IMAGE, f"invalid size {width}x{height}", fmt, sha256=sha)
    if width * height > max_pixels:
        return Probe(
            Status.TOO_LARGE,
            f"{width}x{height} = {width * height} pixels exceeds the limit of {max_pixels}",
            fmt,
            width,
            height,
            sha,
        )
    truncated = _truncation_error(data, fmt)
    if truncated:
        return Probe(Status.INVALID_IMAGE, truncated, fmt, width, height, sha)
    if orientation in _TRANSPOSED:
        width, height = height, width
    return Probe(Status.OK, None, fmt, width, height, sha)
