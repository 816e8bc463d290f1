"""The one decode path: bytes in, pixels as displayed out, or a ``DecodeError`` with a reason.

Every stage that needs pixels (ingest checks, captioning, hashing, export) goes through here,
so EXIF orientation, animation frames, odd modes and broken files are handled the same way
everywhere. Two entry points return ready images:

- ``open_image(data, max_pixels)``: full-size RGB, as displayed.
- ``open_for_hash(data)``: a small grayscale image for the perceptual hash and the box the
  picture fills in it. JPEGs are decoded at a reduced DCT scale (libjpeg "draft" mode) with
  every scan checked, so a JPEG cut mid-scan is refused here (``jpeg_data``); other formats are
  block-averaged by the same factor; that choice changes the hash bits, so this
  function is part of ``phash.PHASH_VERSION`` and must not change without bumping it.

Errors are ``DecodeError(reason, message)``; nothing else escapes for bad input. Do not set
``PIL.ImageFile.LOAD_TRUNCATED_IMAGES``: truncated files would then decode silently grey-filled
instead of being reported as ``truncated``.

Callers that want to choose a reduced size after seeing the header (the export resizer) use the
two halves directly: ``read_header`` then ``load_pixels``.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
from PIL import ExifTags, Image, UnidentifiedImageError

from prx_data.imaging import jpeg_data
from prx_data.imaging.colour import NO_PROFILE, SourceColour, identify

# Machine-readable reasons. ``truncated`` is kept apart from ``invalid_image`` because a
# truncated file is often a failed download worth re-fetching; tables whose status vocabulary
# has no such value record it as ``invalid_image`` (see ``DecodeError.status``).
INVALID_IMAGE: Final = "invalid_image"
TOO_LARGE: Final = "too_large"
TRUNCATED: Final = "truncated"
Reason = Literal["invalid_image", "too_large", "truncated"]

# Same default as the source registry's decompression-bomb guard.
DEFAULT_MAX_PIXELS: Final = 100_000_000

# Formats a web-scale corpus actually contains. Anything else is refused before any plugin
# touches the bytes: some Pillow plugins (EPS) shell out to external programs. Most common first,
# since Pillow tries them in order. (Camera MPO files open through the JPEG entry.)
ALLOWED_FORMATS: Final = (
    "JPEG",
    "PNG",
    "WEBP",
    "GIF",
    "BMP",
    "TIFF",
    "AVIF",
    "ICO",
    "PPM",
    "TGA",
)

# Hash thumbnails are decoded at the smallest JPEG scale that keeps at least this many pixels
# on each side (2x the 32 px DCT input), so the final resize still averages several pixels.
HASH_DRAFT_SIDE: Final = 64

_JPEG_FORMATS = frozenset({"JPEG", "MPO"})
_WHITE = (255, 255, 255)
_ALPHA_MODES = frozenset({"RGBA", "LA", "PA", "La", "RGBa"})
_SIXTEEN_BIT_MODES = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})
_SWAPS_AXES = frozenset({5, 6, 7, 8})  # EXIF orientations that rotate by 90 degrees
# What ImageOps.exif_transpose does for each EXIF orientation.
_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}


class DecodeError(Exception):
    """An image that cannot be used, with a machine-readable ``reason``."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason: Reason = reason
        self.message = message

    @property
    def status(self) -> str:
        """The row status for tables whose vocabulary is ``schema.Status``."""
        return TOO_LARGE if self.reason == TOO_LARGE else INVALID_IMAGE


Box = tuple[float, float, float, float]  # (left, top, right, bottom), Pillow's resize box


@dataclass
class Header:
    """A parsed header; pixels not decoded yet. ``width``/``height`` are as displayed."""

    image: Image.Image
    width: int
    height: int
    format: str
    orientation: int  # EXIF orientation 1..8, 1 when absent or unreadable
    data: bytes  # kept to re-open the file if a reduced decode has to be retried
    stored_size: tuple[int, int]  # (width, height) as encoded, before orientation


def read_header(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> Header:
    """Parse the header only (cheap) and apply the pixel limit before anything is decoded."""
    if not data:
        raise DecodeError(INVALID_IMAGE, "empty data")
    try:
        with warnings.catch_warnings():
            # We enforce our own limit below; Pillow's warning for large images is noise.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=ALLOWED_FORMATS)
    except Image.DecompressionBombError as exc:
        raise DecodeError(TOO_LARGE, str(exc)) from None
    except UnidentifiedImageError:
        # Pillow's own message names the BytesIO object's address: useless in a table.
        raise DecodeError(INVALID_IMAGE, "not an image in a supported format") from None
    except Exception as exc:  # a plugin's SyntaxError/ValueError/struct.error...
        raise DecodeError(INVALID_IMAGE, _describe(exc)) from None
    width, height = image.size
    if width <= 0 or height <= 0:
        raise DecodeError(INVALID_IMAGE, f"empty image size {width}x{height}")
    if width * height > max_pixels:
        raise DecodeError(TOO_LARGE, f"{width}x{height} pixels exceed the limit of {max_pixels}")
    orientation = _orientation(image)
    if orientation in _SWAPS_AXES:
        width, height = height, width
    return Header(image, width, height, image.format or "", orientation, data, image.size)


def load_pixels(
    header: Header,
    mode: Literal["RGB", "L", "YCbCr"] = "RGB",
    min_size: tuple[int, int] | None = None,
    srgb: bool = False,
) -> Image.Image:
    """Decode the first frame, normalise the mode, apply EXIF orientation.

    ``min_size`` (width, height as displayed) allows a reduced image whose sides stay at
    least that large: JPEGs decode at 1/2, 1/4 or 1/8 scale (libjpeg's DCT scaling, close
    to averaging 2x2..8x8 blocks), other formats are reduced by the same factor with
    ``Image.reduce`` (block averages), so a PNG copy of a JPEG yields nearly the same pixels.
    ``mode="YCbCr"`` returns YCbCr only for ordinary colour JPEGs (it skips two colour
    conversions when the result is re-encoded as JPEG) and RGB for everything else.
    ``srgb``: pixels of an image whose embedded profile is not sRGB are converted to sRGB
    through it (``colour``); those come back RGB, never YCbCr. A profile that cannot be used
    leaves the pixels as decoded. A header is consumed by one call.
    """
    image = header.image
    if getattr(image, "is_animated", False) and image.tell() != 0:
        image.seek(0)
    colour = identify(image) if srgb else NO_PROFILE
    if colour.converts and mode == "YCbCr":
        mode = "RGB"
    request = _stored_request(header, min_size)
    is_jpeg = header.format in _JPEG_FORMATS
    if is_jpeg:
        _draft(image, mode, request)
    try:
        image.load()
    except Image.DecompressionBombError as exc:
        raise DecodeError(TOO_LARGE, str(exc)) from None
    except Exception as exc:
        text = _describe(exc)
        if "truncated" in text or "premature end" in text.lower():
            raise DecodeError(TRUNCATED, text) from None
        if image.mode == "YCbCr" and is_jpeg:
            # libjpeg cannot hand out YCbCr for the rare JPEG stored as RGB (Adobe transform
            # 0, or R/G/B component ids): decode it again the ordinary way.
            retry = read_header(header.data, header.width * header.height)
            return load_pixels(retry, "RGB", min_size, srgb)
        raise DecodeError(INVALID_IMAGE, text) from None
    try:
        if colour.converts:
            image = _profile_mode(image, colour)
        elif not (mode == "YCbCr" and image.mode == "YCbCr"):
            image = to_gray(image) if mode == "L" else to_rgb(image)
        if request is not None and not is_jpeg:
            factor = reduction_factor(image.size, request)
            if factor > 1:
                image = image.reduce(factor)
        if colour.transform is not None:
            # On the reduced image (a JPEG's DCT-scaled decode is reduced already): the
            # conversion costs per pixel, and the resize that follows works in sRGB.
            image = _apply(colour, image)
            if mode == "L":
                image = image.convert("L")
        # Applied last, on the smallest image; the orientation was read once from the header.
        return _as_displayed(header, image)
    except Exception as exc:  # an exotic mode Pillow cannot convert, or out of memory
        raise DecodeError(INVALID_IMAGE, f"mode {image.mode}: {_describe(exc)}") from None


def reduction_factor(size: tuple[int, int], request: tuple[int, int]) -> int:
    """Largest of 8, 4, 2, 1 that keeps both sides >= request (Pillow's JPEG draft rule)."""
    fits = min(size[0] // max(1, request[0]), size[1] // max(1, request[1]))
    return next(factor for factor in (8, 4, 2, 1) if fits >= factor or factor == 1)


def picture_box(header: Header, image: Image.Image) -> Box:
    """Where the whole picture lies in ``image`` (decoded from ``header``), as a resize box.

    A JPEG decoded at 1/s scale (or an image reduced by s) is ceil(W/s) pixels wide but the
    picture spans only W/s of them: the last column (and row) stands for a partial block.
    Resizing with this box instead of the full frame keeps the geometry exact, so the same
    picture stored at different sizes yields the same thumbnail (this matters for hash
    equality) and crops stay centred.
    """
    width, height = image.size
    if header.orientation in _SWAPS_AXES:
        width, height = height, width  # back to the stored frame
    stored_w, stored_h = header.stored_size
    for scale in (1, 2, 4, 8):
        if -(-stored_w // scale) == width and -(-stored_h // scale) == height:
            break
    else:
        return (0.0, 0.0, float(image.size[0]), float(image.size[1]))
    # The picture is [0, W/s] x [0, H/s] of the stored frame; map both corners to display.
    x1, y1 = stored_w / scale, stored_h / scale
    corners = [_to_display(header.orientation, x, y, width, height) for x, y in ((0, 0), (x1, y1))]
    xs, ys = [c[0] for c in corners], [c[1] for c in corners]
    return (min(xs), min(ys), max(xs), max(ys))


def _to_display(orientation: int, x: float, y: float, w: float, h: float) -> tuple[float, float]:
    """A point of a w x h stored frame after the orientation's transpose (``_TRANSPOSE``)."""
    if orientation == 2:
        return (w - x, y)
    if orientation == 3:
        return (w - x, h - y)
    if orientation == 4:
        return (x, h - y)
    if orientation == 5:
        return (y, x)
    if orientation == 6:
        return (h - y, x)
    if orientation == 7:
        return (h - y, w - x)
    if orientation == 8:
        return (y, w - x)
    return (x, y)


def open_image(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> Image.Image:
    """Full-size RGB pixels as displayed. Raises ``DecodeError``."""
    return load_pixels(read_header(data, max_pixels), "RGB")


def open_for_hash(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> tuple[Image.Image, Box]:
    """Reduced grayscale pixels for the perceptual hash, and the box the picture fills.

    Part of ``PHASH_VERSION``: JPEGs decode at the smallest DCT scale that keeps
    ``HASH_DRAFT_SIDE`` pixels on each side. Raises ``DecodeError``.
    """
    header = read_header(data, max_pixels)
    min_size = (HASH_DRAFT_SIDE, HASH_DRAFT_SIDE)
    if header.format in _JPEG_FORMATS:
        image = _checked_jpeg_gray(header, min_size)
    else:
        image = load_pixels(header, "L", min_size)
    return image, picture_box(header, image)


def _checked_jpeg_gray(header: Header, min_size: tuple[int, int]) -> Image.Image:
    """``load_pixels(header, "L", min_size)``'s pixels, with every scan checked on the way
    (``jpeg_data``): a JPEG cut mid-scan gets no hash, so it is neither exported nor taken
    as the kept copy of a duplicate group. The scans are Huffman-decoded once, by libjpeg-turbo,
    except for CMYK files, whose grey comes from Pillow's conversion after a separate check.
    """
    try:
        if header.image.mode not in ("L", "RGB"):
            jpeg_data.check(header.data)
            return load_pixels(header, "L", min_size)
        factor = reduction_factor(header.stored_size, _stored_request(header, min_size) or (1, 1))
        gray = Image.fromarray(jpeg_data.decode_gray(header.data, factor, header.stored_size))
    except jpeg_data.JpegDataError as exc:
        raise DecodeError(TRUNCATED if exc.truncated else INVALID_IMAGE, str(exc)) from None
    return _as_displayed(header, gray)


def _apply(colour: SourceColour, image: Image.Image) -> Image.Image:
    """The profile's transform; should LittleCMS refuse these pixels after all, they are used
    as decoded (as sRGB), like any other unusable profile."""
    try:
        return colour.to_srgb(image)
    except Exception:
        return to_rgb(image)


def _profile_mode(image: Image.Image, colour: SourceColour) -> Image.Image:
    """Decoded pixels in the mode their profile describes, normalised as ``to_rgb``/``to_gray``
    do (alpha composited on white, 16-bit samples scaled)."""
    if colour.mode == "RGB":
        return to_rgb(image)
    if colour.mode == "L":
        return to_gray(image)
    return image


def _as_displayed(header: Header, image: Image.Image) -> Image.Image:
    """``image`` (decoded from ``header``'s stored frame) turned by the EXIF orientation."""
    method = _TRANSPOSE.get(header.orientation)
    return image.transpose(method) if method is not None else image


def to_rgb(image: Image.Image) -> Image.Image:
    """RGB with transparency composited on white and 16-bit samples scaled, not clipped."""
    mode = image.mode
    transparent = mode in _ALPHA_MODES or "transparency" in image.info
    if mode == "RGB" and not transparent:
        return image
    if mode in _SIXTEEN_BIT_MODES or mode == "F":
        return Image.fromarray(_to_uint8(image), "L").convert("RGB")
    if transparent:
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, _WHITE)
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    # L, 1, P, CMYK (Adobe's inverted CMYK is undone by the JPEG plugin), YCbCr, HSV.
    return image.convert("RGB")


def to_gray(image: Image.Image) -> Image.Image:
    """Luma (ITU-R 601, as JPEG's Y) after the same normalisation as ``to_rgb``."""
    opaque = "transparency" not in image.info
    if image.mode == "L" and opaque:
        return image
    if image.mode in _SIXTEEN_BIT_MODES or image.mode == "F":
        return Image.fromarray(_to_uint8(image), "L")
    if image.mode == "RGB" and opaque:
        return image.convert("L")
    return to_rgb(image).convert("L")


def _to_uint8(image: Image.Image) -> np.ndarray:
    """Scale 16-bit (and float) samples to 8 bits; Pillow's own convert clips them at 255."""
    pixels = np.asarray(image)
    if image.mode == "F":
        # No bit depth to go by: 0..1 floats are scaled, anything else is taken as 0..255.
        values = pixels.astype(np.float64)
        if np.nanmax(values, initial=0.0) <= 1.0:
            values = values * 255.0
        return np.clip(np.nan_to_num(values) + 0.5, 0, 255).astype(np.uint8)
    # Mode "I" almost always holds a 16-bit PNG/TIFF; values outside 0..65535 are clipped.
    values = np.clip(pixels.astype(np.int64), 0, 65535)
    return ((values * 255 + 32767) // 65535).astype(np.uint8)


def _stored_request(header: Header, min_size: tuple[int, int] | None) -> tuple[int, int] | None:
    """``min_size`` is as displayed; decoders work on the stored (unrotated) frame."""
    if min_size is None:
        return None
    width, height = max(1, min_size[0]), max(1, min_size[1])
    return (height, width) if header.orientation in _SWAPS_AXES else (width, height)


def _draft(image: Image.Image, mode: str, request: tuple[int, int] | None) -> None:
    """Ask libjpeg for the target mode and the smallest 1/2^k scale that keeps ``request``."""
    try:
        image.draft(mode, request)
    except Exception:  # draft is an optimisation; without it the full decode still works
        pass


def _orientation(image: Image.Image) -> int:
    if image.format == "PNG" and "exif" not in image.info:
        # Pillow's PNG getexif() decodes the whole image to look for an eXIf chunk after the
        # pixels. Writers put eXIf before IDAT; one placed after it is ignored, so that the
        # header stays cheap and the decode happens once, inside load_pixels' error handling.
        return 1
    try:
        value = int(image.getexif().get(ExifTags.Base.Orientation, 1))
    except Exception:  # unreadable EXIF: show the image as stored
        return 1
    return value if 1 <= value <= 8 else 1


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]
