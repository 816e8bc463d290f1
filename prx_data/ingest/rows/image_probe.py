"""Cheap validation of image bytes at ingest: format, dimensions as displayed, structure.

Ingest must run near the speed of copying bytes, so ordinary files are never decoded here: the
header gives format and size (through the one decode path, ``imaging.decode.read_header``,
which reads EXIF without touching pixels), the pixel limit is applied to that header, and a
walk over the file's structure (``image_structure``) confirms the picture data is all there. Only a
file whose structure looks incomplete is decoded, and then the decode decides: an image is
``truncated`` only when its picture data really ends early.

A JPEG cut mid-scan and ending in ``FF D9`` passes the structure walk. Its scans are checked
where they are first Huffman-decoded, by the perceptual hash (``imaging.jpeg_data``): such a
row gets a ``phash_error`` instead of a hash, and the export drops it. Checking here as well
would decode every JPEG twice (~1.2 ms of CPU each for a 200 KB photo, about as much as its
download), as ingest did before.

The format comes from the decoded header, never the file name, and must be in the spec's
allow-list. Bytes of a real format outside it (EPS, PDF, HEIC, SVG...) are
``unsupported_format`` without any Pillow plugin parsing them.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass

from PIL import Image

from prx_data.core.schema import Status
from prx_data.imaging.decode import DecodeError, load_pixels, read_header
from prx_data.ingest.registry import DEFAULT_FORMATS
from prx_data.ingest.rows.image_structure import complete

# Magic numbers of formats people mistake for images, to name them in the error.
_SNIFF = (
    (b"%!PS", "PostScript/EPS"),
    (b"\xc5\xd0\xd3\xc6", "EPS (DOS binary)"),
    (b"%PDF", "PDF"),
    (b"8BPS", "Photoshop PSD"),
    (b"\x00\x00\x00\x0cjP  ", "JPEG 2000"),
    (b"\xff\x4f\xff\x51", "JPEG 2000 codestream"),
    (b"\xff\x0a", "JPEG XL"),
    (b"\x00\x00\x00\x0cJXL ", "JPEG XL"),
    (b"gimp xcf", "GIMP XCF"),
    (b"II*\x00\x10\x00\x00\x00CR", "Canon RAW"),
)
_FTYP_BRANDS = {b"heic": "HEIC", b"heix": "HEIC", b"mif1": "HEIF", b"msf1": "HEIF", b"hevc": "HEIC"}


@dataclass(frozen=True)
class Probe:
    status: Status
    error: str | None = None
    image_format: str | None = None
    width: int | None = None
    height: int | None = None
    sha256: str | None = None


def _sniff(data: bytes) -> str | None:
    for magic, name in _SNIFF:
        if data.startswith(magic):
            return name
    if data[4:8] == b"ftyp" and data[8:12] in _FTYP_BRANDS:
        return _FTYP_BRANDS[data[8:12]]
    head = data[:256].lstrip().lower()
    if head.startswith(b"<svg") or (head.startswith(b"<?xml") and b"<svg" in data[:4096].lower()):
        return "SVG"
    return None


def _header(data: bytes):
    with warnings.catch_warnings():
        # The limit is applied below from the header, with our own message.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        previous = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = None
        try:
            return read_header(data, max_pixels=2**62)
        finally:
            Image.MAX_IMAGE_PIXELS = previous


def probe_image(
    data: bytes | None,
    max_pixels: int,
    max_bytes: int | None = None,
    formats: tuple[str, ...] | list[str] = DEFAULT_FORMATS,
) -> Probe:
    """Classify ``data`` as usable or not, with a readable reason."""
    if data is None:
        return Probe(Status.MISSING, "no image data")
    sha = hashlib.sha256(data).hexdigest()
    if len(data) == 0:
        return Probe(Status.INVALID_IMAGE, "empty file (0 bytes)", sha256=sha)
    if max_bytes is not None and len(data) > max_bytes:
        return Probe(Status.TOO_LARGE, f"{len(data)} bytes exceeds the limit of {max_bytes}", sha256=sha)
    try:
        header = _header(data)
    except DecodeError as exc:
        named = _sniff(data)
        if named:
            return Probe(Status.UNSUPPORTED_FORMAT, f"{named} is not an accepted image format", sha256=sha)
        if exc.message.startswith("not an image"):
            return Probe(Status.INVALID_IMAGE, "not a recognised image format", sha256=sha)
        return Probe(Status.INVALID_IMAGE, f"unreadable image header: {exc.message}", sha256=sha)
    # Camera MPO files are JPEGs with extra frames; they are accepted as JPEG.
    fmt = header.format or "unknown"
    family = "JPEG" if fmt == "MPO" else fmt
    if family not in formats:
        return Probe(Status.UNSUPPORTED_FORMAT, f"format {fmt} is not in the accepted formats {list(formats)}", fmt, sha256=sha)
    width, height = header.width, header.height
    if width * height > max_pixels:
        return Probe(
            Status.TOO_LARGE,
            f"{width}x{height} = {width * height} pixels exceeds the limit of {max_pixels}",
            fmt,
            width,
            height,
            sha,
        )
    if complete(data, fmt) is not True:
        # The structure looks short: only a full decode can tell a real truncation from an
        # odd layout that decodes fine. Rare, and bounded by the pixel limit checked above.
        try:
            load_pixels(header, "RGB")
        except DecodeError as exc:
            kind = "truncated" if exc.reason == "truncated" else "undecodable"
            return Probe(Status.INVALID_IMAGE, f"{kind} {fmt}: {exc.message}", fmt, width, height, sha)
    return Probe(Status.OK, None, fmt, width, height, sha)
